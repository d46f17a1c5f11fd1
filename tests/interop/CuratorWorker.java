// A contender fleet of Apache Curator recipes for the interop tests (tests/test_interop.py): one JVM, one
// thread and one CuratorFramework (its own ZooKeeper session) per contender. Compiled by the tests with
// javac against Debian's libcurator-recipes-java; never committed as a .class.
//
// usage: CuratorWorker CONNECT PATH RECIPES HOLDS HOLD_MS
//   RECIPES: comma-separated, one contender each: mutex | read | write | latch
// stdin:  "now" -> prints "now <System.nanoTime()>" (clock check); "go" -> the contenders start
// stdout: "ready", then per hold "hold <recipe> <node> <t0 ns> <t1 ns>", "done" at the end,
//         "error <recipe> <message>" if a contender fails.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryNTimes;

public class CuratorWorker {
    static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework c, String p) { super(c, p); }
        String node() { return getLockPath(); }
    }

    static final class Write extends InterProcessReadWriteLock.WriteLock {
        Write(CuratorFramework c, String p) { super(c, p, null); }
        String node() { return getLockPath(); }
    }

    static final class Read extends InterProcessReadWriteLock.ReadLock {
        Read(CuratorFramework c, String p) { super(c, p, null, new InterProcessReadWriteLock.WriteLock(c, p, null)); }
        String node() { return getLockPath(); }
    }

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static void hold(String recipe, String node, long t0, long t1) {
        say("hold " + recipe + " " + node.substring(node.lastIndexOf('/') + 1) + " " + t0 + " " + t1);
    }

    static void once(CuratorFramework c, String path, String recipe) throws Exception {
        if (recipe.equals("latch")) {
            LeaderLatch latch = new LeaderLatch(c, path, "warmup");
            latch.start();
            latch.await();
            latch.close();
        } else {
            InterProcessMutex m = recipe.equals("mutex") ? new Mutex(c, path)
                : recipe.equals("write") ? new Write(c, path) : new Read(c, path);
            m.acquire();
            m.release();
        }
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0], path = args[1];
        String[] recipes = args[2].split(",");
        int holds = Integer.parseInt(args[3]);
        long holdMs = Long.parseLong(args[4]);
        List<CuratorFramework> clients = new ArrayList<>();
        for (String r : recipes) {
            CuratorFramework c = CuratorFrameworkFactory.newClient(connect, 10000, 10000, new RetryNTimes(50, 100));
            c.start();
            if (!c.blockUntilConnected(30, java.util.concurrent.TimeUnit.SECONDS)) throw new IllegalStateException("no connection");
            clients.add(c);
        }
        for (int i = 0; i < recipes.length; i++) {  // warm up (class loading, JIT): the mix starts mixed
            if (holds > 0) {
                once(clients.get(i), path + "-warmup-" + i, recipes[i]);
            }
        }
        CountDownLatch go = new CountDownLatch(1);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < recipes.length; i++) {
            final String recipe = recipes[i];
            final CuratorFramework c = clients.get(i);
            final int n = i;
            Thread t = new Thread(() -> {
                try {
                    go.await();
                    for (int k = 0; k < holds; k++) {
                        if (recipe.equals("latch")) {
                            LeaderLatch latch = new LeaderLatch(c, path, "curator-" + n);
                            latch.start();
                            latch.await();
                            long t0 = System.nanoTime();
                            Thread.sleep(holdMs);
                            long t1 = System.nanoTime();
                            String node = latch.getOurPath();
                            latch.close();
                            hold(recipe, node, t0, t1);
                            continue;
                        }
                        long t0, t1;
                        String node;
                        if (recipe.equals("mutex")) {
                            Mutex m = new Mutex(c, path);
                            m.acquire();
                            t0 = System.nanoTime(); Thread.sleep(holdMs); t1 = System.nanoTime();
                            node = m.node();
                            m.release();
                        } else if (recipe.equals("write")) {
                            Write m = new Write(c, path);
                            m.acquire();
                            t0 = System.nanoTime(); Thread.sleep(holdMs); t1 = System.nanoTime();
                            node = m.node();
                            m.release();
                        } else if (recipe.equals("read")) {
                            Read m = new Read(c, path);
                            m.acquire();
                            t0 = System.nanoTime(); Thread.sleep(holdMs); t1 = System.nanoTime();
                            node = m.node();
                            m.release();
                        } else {
                            throw new IllegalArgumentException("unknown recipe " + recipe);
                        }
                        hold(recipe, node, t0, t1);
                    }
                } catch (Exception e) {
                    say("error " + recipe + " " + e);
                }
            });
            t.start();
            threads.add(t);
        }
        say("ready");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.equals("now")) {
                say("now " + System.nanoTime());
            } else if (line.equals("go")) {
                break;
            }
        }
        go.countDown();
        for (Thread t : threads) t.join();
        for (CuratorFramework c : clients) c.close();
        say("done");
        System.exit(0);
    }
}
