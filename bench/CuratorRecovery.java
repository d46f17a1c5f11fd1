// The Curator side of bench/recovery.py: one JVM = one contender with its own CuratorFramework (its own
// ZooKeeper session) and one InterProcessMutex on PATH. Compiled by bench/recovery.py with javac against
// Debian's libcurator-recipes-java; never committed as a .class.
//
// usage: CuratorRecovery CONNECT PATH SESSION_MS holder|waiter
// stdout (T: System.nanoTime(), CLOCK_MONOTONIC on Linux, as Python's time.monotonic_ns()):
//   session SID_HEX PASSWORD_HEX   once connected
//   held T                          the holder's acquire returned
//   granted T                       the waiter's acquire returned
//   state STATE T                   every connection state Curator reports (SUSPENDED, LOST, RECONNECTED, ...)
//   error MESSAGE
// The process runs until it is killed.
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryForever;
import org.apache.zookeeper.ZooKeeper;

public class CuratorRecovery {
    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder();
        for (byte x : b) s.append(String.format("%02x", x));
        return s.toString();
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0], path = args[1], role = args[3];
        int sessionMs = Integer.parseInt(args[2]);
        CuratorFramework client = CuratorFrameworkFactory.newClient(connect, sessionMs, 15000, new RetryForever(100));
        client.getConnectionStateListenable().addListener(
            (c, state) -> say("state " + state.name() + " " + System.nanoTime()));
        client.start();
        if (!client.blockUntilConnected(60, TimeUnit.SECONDS)) throw new IllegalStateException("no connection");
        ZooKeeper zk = client.getZookeeperClient().getZooKeeper();
        say("session " + Long.toHexString(zk.getSessionId()) + " " + hex(zk.getSessionPasswd()));
        InterProcessMutex mutex = new InterProcessMutex(client, path);
        try {
            mutex.acquire();
            say((role.equals("holder") ? "held " : "granted ") + System.nanoTime());
        } catch (Exception e) {
            say("error " + String.valueOf(e).replace('\n', ' '));
        }
        Thread.sleep(Long.MAX_VALUE);
    }
}
