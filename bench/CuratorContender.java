// The Curator contender of bench/contention.py (issue 30): one JVM = one process of the fleet, one
// CuratorFramework (one ZooKeeper session) shared by its threads, as Curator's documentation asks
// ("share one CuratorFramework per ZooKeeper cluster"), and one InterProcessMutex per thread.
// Compiled by bench/contention.py with javac against Debian's libcurator-recipes-java; never committed
// as a .class.
//
// usage: CuratorContender CONNECT PATH THREADS SESSION_MS WORK_US
// stdout: "ready" once connected; after "go T0_NS END_NS" on stdin each thread waits for T0, then loops
//         acquire -> WORK_US of busy work -> release until END_NS (System.nanoTime(), CLOCK_MONOTONIC on
//         Linux, as Python's time.monotonic_ns()); at the end one line per grant
//         "g <thread> <acquire call> <acquire return> <release call> <release return>" (ns), "error <thread>
//         <message>" for a contender that failed, and "done".
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryNTimes;

public class CuratorContender {
    static final class Grants {
        long[] t = new long[4 * 1024];
        int n;

        void add(long a, long b, long c, long d) {
            if (n + 4 > t.length) t = java.util.Arrays.copyOf(t, t.length * 2);
            t[n++] = a; t[n++] = b; t[n++] = c; t[n++] = d;
        }
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0], path = args[1];
        int threads = Integer.parseInt(args[2]);
        int sessionMs = Integer.parseInt(args[3]);
        long workNs = Long.parseLong(args[4]) * 1000L;
        CuratorFramework client = CuratorFrameworkFactory.newClient(connect, sessionMs, 15000, new RetryNTimes(50, 100));
        client.start();
        if (!client.blockUntilConnected(60, TimeUnit.SECONDS)) throw new IllegalStateException("no connection");
        System.out.println("ready");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        long t0 = 0, end = 0;
        while ((line = in.readLine()) != null) {
            if (line.startsWith("go ")) {
                String[] p = line.split(" ");
                t0 = Long.parseLong(p[1]);
                end = Long.parseLong(p[2]);
                break;
            }
        }
        if (line == null) System.exit(2);
        final long start = t0, stop = end;
        Grants[] grants = new Grants[threads];
        String[] errors = new String[threads];
        List<Thread> running = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            final int k = i;
            grants[k] = new Grants();
            Thread t = new Thread(() -> {
                try {
                    InterProcessMutex mutex = new InterProcessMutex(client, path);
                    long wait = start - System.nanoTime();
                    if (wait > 0) Thread.sleep(wait / 1000000L, (int) (wait % 1000000L));
                    while (System.nanoTime() < stop) {
                        long a = System.nanoTime();
                        mutex.acquire();
                        long b = System.nanoTime();
                        while (System.nanoTime() - b < workNs) { /* the holder's work */ }
                        long c = System.nanoTime();
                        mutex.release();
                        long d = System.nanoTime();
                        grants[k].add(a, b, c, d);
                    }
                } catch (Exception e) {
                    errors[k] = String.valueOf(e).replace('\n', ' ');
                }
            });
            t.start();
            running.add(t);
        }
        for (Thread t : running) t.join();
        StringBuilder out = new StringBuilder();
        for (int k = 0; k < threads; k++) {
            long[] t = grants[k].t;
            for (int j = 0; j < grants[k].n; j += 4) {
                out.append("g ").append(k).append(' ').append(t[j]).append(' ').append(t[j + 1]).append(' ')
                    .append(t[j + 2]).append(' ').append(t[j + 3]).append('\n');
            }
            if (errors[k] != null) out.append("error ").append(k).append(' ').append(errors[k]).append('\n');
        }
        System.out.print(out);
        client.close();
        System.out.println("done");
        System.out.flush();
        System.exit(0);
    }
}
