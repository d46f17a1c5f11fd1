// The Curator half of the safety lab's mixed-curator trial (lab/mixed_trial.py): one JVM hosting several
// contenders, each with its own CuratorFramework (its own ZooKeeper session) and its own InterProcessMutex
// on one path, looping acquire -> fenced read-modify-write -> verify -> release. Compiled by the lab with
// javac against Debian's libcurator-recipes-java; never committed as a .class.
//
// The JVM never touches the fenced register itself (Java cannot take the register's flock): its parent,
// a Python lab.worker process (lab/mixed_worker.py), performs every register operation on its behalf and
// writes the history. Times are System.nanoTime() (CLOCK_MONOTONIC on Linux, as Python's time.monotonic()).
//
// usage: LabCuratorWorker CONNECT PATH CONTENDERS SESSION_MS HOLD_LO_MS HOLD_HI_MS SEED
// stdout, one line per event (K: contender, N: its request number, T: nanoTime):
//   session K SID_HEX PASSWORD_HEX | state K STATE | acquire K N T | acquire_fail K N T | acquire_error K N MSG
//   grant K N NODE TOKEN T (TOKEN -1: the node was gone before its czxid could be read)
//   op K N read TOKEN | op K N write TOKEN VALUE   (answered on stdin: "reply K ok VALUE" / "reply K stale")
//   check_fail K N MSG | done K N | verify K N T0 alive|gone|error:WHAT
//   release_start K N T | release K N T | release_error K N MSG | final K NODE,NODE | exit
// stdin: replies, and "stop" (contenders are interrupted, release, record their nodes, and the JVM exits).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryForever;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.Stat;

public class LabCuratorWorker {
    static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework c, String p) { super(c, p); }
        String node() { return getLockPath(); }
    }

    static final class NotHeld extends Exception {
        NotHeld(String m) { super(m); }
    }

    static final class Stale extends Exception {
        Stale() { super("stale token"); }
    }

    static volatile boolean stopping = false;
    static String path;
    static int sessionMs;
    static final List<BlockingQueue<String>> replies = new ArrayList<>();

    static synchronized void say(Object... words) {
        StringBuilder b = new StringBuilder();
        for (Object w : words) {
            if (b.length() > 0) b.append(' ');
            b.append(String.valueOf(w).replace('\n', ' '));
        }
        System.out.println(b);
        System.out.flush();
    }

    static String hex(byte[] bytes) {
        StringBuilder b = new StringBuilder();
        for (byte x : bytes) b.append(String.format("%02x", x));
        return b.toString();
    }

    static long op(int k, int n, String what, long token, long value) throws Exception {
        if (what.equals("read")) say("op", k, n, "read", token);
        else say("op", k, n, "write", token, value);
        String r = replies.get(k).take();
        String[] p = r.split(" ");
        if (p[0].equals("ok")) return Long.parseLong(p[1]);
        if (p[0].equals("stale")) throw new Stale();
        throw new IllegalStateException("register: " + r);
    }

    /** Our node still there, ours, after a sync: the hold was valid at least until t0. */
    static String verify(CuratorFramework c, String node, long token) {
        try {
            ZooKeeper zk = c.getZookeeperClient().getZooKeeper();
            CountDownLatch done = new CountDownLatch(1);
            int[] rc = {-999};
            zk.sync(path, (r, p, ctx) -> { rc[0] = r; done.countDown(); }, null);
            if (!done.await(sessionMs, TimeUnit.MILLISECONDS)) return "error:sync-timeout";
            if (rc[0] != 0) return "error:sync-rc" + rc[0];
            Stat s = zk.exists(node, false);
            return s != null && s.getCzxid() == token && s.getEphemeralOwner() == zk.getSessionId() ? "alive" : "gone";
        } catch (Exception e) {
            return "error:" + e.getClass().getSimpleName();
        }
    }

    static void contender(int k, CuratorFramework c, long lo, long hi, Random rnd) {
        Mutex m = new Mutex(c, path);
        int n = 0;
        while (!stopping) {
            n++;
            say("acquire", k, n, System.nanoTime());
            boolean ok;
            try {
                ok = m.acquire(1, TimeUnit.HOURS);
            } catch (InterruptedException e) {
                say("acquire_fail", k, n, System.nanoTime());
                break;
            } catch (Exception e) {
                say("acquire_error", k, n, e.getClass().getSimpleName() + ": " + e.getMessage());
                try { Thread.sleep(100); } catch (InterruptedException ie) { break; }
                continue;
            }
            if (!ok) {
                say("acquire_fail", k, n, System.nanoTime());
                continue;
            }
            long granted = System.nanoTime();
            String node = m.node();
            long token = -1;
            try {
                ZooKeeper zk = c.getZookeeperClient().getZooKeeper();
                Stat s = zk.exists(node, false);  // the czxid: one extra read, as the kazoo half
                if (s != null && s.getEphemeralOwner() == zk.getSessionId()) token = s.getCzxid();
            } catch (Exception e) {
                // token stays -1: recorded as no_token
            }
            say("grant", k, n, node.substring(node.lastIndexOf('/') + 1), token, granted);
            try {
                if (token >= 0) {
                    long pause = lo + (hi > lo ? (long) (rnd.nextDouble() * (hi - lo)) : 0);
                    try {
                        if (!m.isOwnedByCurrentThread()) throw new NotHeld("isOwnedByCurrentThread() is false");
                        long v = op(k, n, "read", token, 0);
                        Thread.sleep(pause);
                        if (!m.isOwnedByCurrentThread()) throw new NotHeld("isOwnedByCurrentThread() is false");
                        op(k, n, "write", token, v + 1);
                        say("done", k, n);
                    } catch (NotHeld e) {
                        say("check_fail", k, n, "NotHeld: " + e.getMessage());
                    } catch (Stale e) {
                        // the parent recorded the rejection
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    } catch (Exception e) {
                        say("release_error", k, n, "critical: " + e);
                    }
                    long t0 = System.nanoTime();
                    say("verify", k, n, t0, verify(c, node, token));
                }
            } finally {
                say("release_start", k, n, System.nanoTime());
                Thread.interrupted();  // a stop during the hold: release all the same
                try {
                    m.release();
                } catch (Exception e) {
                    say("release_error", k, n, e.getClass().getSimpleName() + ": " + e.getMessage());
                    m = new Mutex(c, path);  // a fresh object, as a careful user would
                }
                say("release", k, n, System.nanoTime());
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        path = args[1];
        int contenders = Integer.parseInt(args[2]);
        sessionMs = Integer.parseInt(args[3]);
        long lo = Long.parseLong(args[4]), hi = Long.parseLong(args[5]);
        long seed = Long.parseLong(args[6]);
        List<CuratorFramework> clients = new ArrayList<>();
        for (int k = 0; k < contenders; k++) {
            final int kk = k;
            CuratorFramework c = CuratorFrameworkFactory.newClient(connect, sessionMs, sessionMs, new RetryForever(50));
            c.getConnectionStateListenable().addListener((cf, state) -> say("state", kk, state));
            c.start();
            if (!c.blockUntilConnected(30, TimeUnit.SECONDS)) throw new IllegalStateException("no connection");
            clients.add(c);
            replies.add(new ArrayBlockingQueue<>(4));
        }
        Thread sessions = new Thread(() -> {  // publish each contender's current session, for the nemesis
            long[] last = new long[contenders];
            while (!stopping) {
                for (int k = 0; k < contenders; k++) {
                    try {
                        CuratorFramework c = clients.get(k);
                        if (!c.getZookeeperClient().isConnected()) continue;
                        ZooKeeper zk = c.getZookeeperClient().getZooKeeper();
                        long sid = zk.getSessionId();
                        if (sid != 0 && sid != last[k] && zk.getState().isConnected()) {
                            last[k] = sid;
                            say("session", k, Long.toHexString(sid), hex(zk.getSessionPasswd()));
                        }
                    } catch (Exception e) {
                        // next round
                    }
                }
                try { Thread.sleep(20); } catch (InterruptedException e) { return; }
            }
        });
        sessions.setDaemon(true);
        sessions.start();
        List<Thread> threads = new ArrayList<>();
        for (int k = 0; k < contenders; k++) {
            final int kk = k;
            final CuratorFramework c = clients.get(k);
            final Random rnd = new Random(seed * 31 + k);
            Thread t = new Thread(() -> contender(kk, c, lo, hi, rnd), "contender-" + k);
            t.start();
            threads.add(t);
        }
        Thread input = new Thread(() -> {
            try {
                BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
                String line;
                while ((line = in.readLine()) != null) {
                    if (line.equals("stop")) break;
                    String[] p = line.split(" ", 3);
                    if (p[0].equals("reply")) replies.get(Integer.parseInt(p[1])).put(p[2]);
                }
            } catch (Exception e) {
                // stop
            }
            stopping = true;
            for (Thread t : threads) t.interrupt();
        });
        input.setDaemon(true);
        input.start();
        for (Thread t : threads) t.join();
        for (int k = 0; k < contenders; k++) {  // which lock nodes our sessions still own
            StringBuilder own = new StringBuilder();
            try {
                ZooKeeper zk = clients.get(k).getZookeeperClient().getZooKeeper();
                for (String child : zk.getChildren(path, false)) {
                    Stat s = zk.exists(path + "/" + child, false);
                    if (s != null && s.getEphemeralOwner() == zk.getSessionId()) {
                        if (own.length() > 0) own.append(',');
                        own.append(path).append('/').append(child);
                    }
                }
                say("final", k, own.length() > 0 ? own : "-");
            } catch (Exception e) {
                say("final_error", k, e.getClass().getSimpleName());
            }
            clients.get(k).close();
        }
        say("exit");
        System.exit(0);
    }
}
