// The Curator contender of bench/service.py (issue 48): one JVM = one process of the service, one
// CuratorFramework (one ZooKeeper session) and one InterProcessReadWriteLock shared by its threads, as
// Curator's documentation asks. Compiled by bench/service.py with javac against Debian's
// libcurator-recipes-java (zkrecipes.testing._java, as bench/contention.py does); never committed as a .class.
//
// usage: CuratorService CONNECT PATH reader|writer THREADS SESSION_MS HOLD_US PAUSE_US
// stdout: "ready" once connected; after "go T0_NS END_NS W0_NS" on stdin each thread waits for T0, then loops
//         until END_NS (System.nanoTime(), CLOCK_MONOTONIC on Linux, as Python's time.monotonic_ns()):
//         reader: read-acquire -> HOLD_US asleep -> release; writer (one thread): write-acquire -> HOLD_US
//         asleep -> release -> PAUSE_US asleep. At the end, a reader prints "n GRANTS" (acquire returns in
//         [W0, END)), "a L1 L2 ..." (those acquires' call-to-return, ns) and "u B C" per interval of the union
//         of its threads' holds (acquire return .. release call, ns); a writer "w A B C D" per grant; then
//         "error <thread> <message>" for a thread that failed, and "done".
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryNTimes;

public class CuratorService {
    static final class Longs {
        long[] v = new long[1024];
        int n;

        void add(long x) {
            if (n == v.length) v = Arrays.copyOf(v, n * 2);
            v[n++] = x;
        }
    }

    static void sleepNs(long ns) throws InterruptedException {
        if (ns > 0) Thread.sleep(ns / 1000000L, (int) (ns % 1000000L));
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0], path = args[1];
        boolean writer = args[2].equals("writer");
        int threads = Integer.parseInt(args[3]);
        int sessionMs = Integer.parseInt(args[4]);
        long holdNs = Long.parseLong(args[5]) * 1000L, pauseNs = Long.parseLong(args[6]) * 1000L;
        CuratorFramework client = CuratorFrameworkFactory.newClient(connect, sessionMs, 15000, new RetryNTimes(50, 100));
        client.start();
        if (!client.blockUntilConnected(60, TimeUnit.SECONDS)) throw new IllegalStateException("no connection");
        InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);  // one per JVM, shared
        System.out.println("ready");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        long[] go = null;
        while ((line = in.readLine()) != null) {
            if (line.startsWith("go ")) {
                String[] p = line.split(" ");
                go = new long[] {Long.parseLong(p[1]), Long.parseLong(p[2]), Long.parseLong(p[3])};
                break;
            }
        }
        if (go == null) System.exit(2);
        final long start = go[0], stop = go[1], w0 = go[2];
        final InterProcessMutex lock = writer ? rw.writeLock() : rw.readLock();
        final Longs[] holds = new Longs[threads];  // per thread: acquire return, release call, ...
        final Longs[] waits = new Longs[threads];  // per thread: a b c d per grant (writer), latency (reader)
        final String[] errors = new String[threads];
        List<Thread> running = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            final int k = i;
            holds[k] = new Longs();
            waits[k] = new Longs();
            Thread t = new Thread(() -> {
                try {
                    sleepNs(start - System.nanoTime());
                    while (System.nanoTime() < stop) {
                        long a = System.nanoTime();
                        lock.acquire();
                        long b = System.nanoTime();
                        sleepNs(holdNs);
                        long c = System.nanoTime();
                        lock.release();
                        long d = System.nanoTime();
                        holds[k].add(b);
                        holds[k].add(c);
                        if (writer) {
                            waits[k].add(a); waits[k].add(b); waits[k].add(c); waits[k].add(d);
                            sleepNs(pauseNs);
                        } else if (b >= w0 && b < stop) {
                            waits[k].add(b - a);
                        }
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
        if (writer) {
            for (int k = 0; k < threads; k++) {
                long[] v = waits[k].v;
                for (int j = 0; j < waits[k].n; j += 4) {
                    out.append("w ").append(v[j]).append(' ').append(v[j + 1]).append(' ').append(v[j + 2])
                        .append(' ').append(v[j + 3]).append('\n');
                }
            }
        } else {
            int grants = 0;
            StringBuilder lat = new StringBuilder("a");
            for (int k = 0; k < threads; k++) {
                grants += waits[k].n;
                for (int j = 0; j < waits[k].n; j++) lat.append(' ').append(waits[k].v[j]);
            }
            out.append("n ").append(grants).append('\n').append(lat).append('\n');
            int total = 0;
            for (Longs h : holds) total += h.n / 2;
            long[][] iv = new long[total][];
            int m = 0;
            for (Longs h : holds) for (int j = 0; j < h.n; j += 2) iv[m++] = new long[] {h.v[j], h.v[j + 1]};
            Arrays.sort(iv, (x, y) -> Long.compare(x[0], y[0]));
            long ub = 0, uc = 0;
            boolean open = false;
            for (long[] x : iv) {  // the union of the holds: what a writer's hold must not meet
                if (open && x[0] <= uc) {
                    uc = Math.max(uc, x[1]);
                } else {
                    if (open) out.append("u ").append(ub).append(' ').append(uc).append('\n');
                    ub = x[0];
                    uc = x[1];
                    open = true;
                }
            }
            if (open) out.append("u ").append(ub).append(' ').append(uc).append('\n');
        }
        for (int k = 0; k < threads; k++) {
            if (errors[k] != null) out.append("error ").append(k).append(' ').append(errors[k]).append('\n');
        }
        System.out.print(out);
        client.close();
        System.out.println("done");
        System.out.flush();
        System.exit(0);
    }
}
