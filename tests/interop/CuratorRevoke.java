// Curator's own revocation beside zkrecipes' (tests/test_interop.py): an InterProcessMutex made revocable
// (makeRevocable), and Revoker.attemptRevoke on a lock node. Compiled by the tests with javac against
// Debian's libcurator-recipes-java; never committed as a .class.
//
// usage: CuratorRevoke CONNECT hold PATH
//          stdout: "held <node name>" once the revocable mutex is held; "revoke-requested" each time its
//          RevocationListener is called; stdin "release" -> releases, prints "released" and exits
//        CuratorRevoke CONNECT revoke NODE_PATH
//          stdout: "revoked" once Revoker.attemptRevoke(client, NODE_PATH) returned
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.Revoker;
import org.apache.curator.retry.RetryNTimes;

public class CuratorRevoke {
    static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework c, String p) { super(c, p); }
        String node() { return getLockPath(); }
    }

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.newClient(args[0], 10000, 10000, new RetryNTimes(50, 100));
        c.start();
        if (!c.blockUntilConnected(30, TimeUnit.SECONDS)) throw new IllegalStateException("no connection");
        try {
            if (args[1].equals("hold")) {
                Mutex m = new Mutex(c, args[2]);
                m.makeRevocable(lock -> say("revoke-requested"));
                m.acquire();
                String node = m.node();
                say("held " + node.substring(node.lastIndexOf('/') + 1));
                BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
                String line;
                while ((line = in.readLine()) != null && !line.equals("release")) {
                    // wait for the test's word
                }
                m.release();
                say("released");
            } else if (args[1].equals("revoke")) {
                Revoker.attemptRevoke(c, args[2]);
                say("revoked");
            } else {
                throw new IllegalArgumentException("unknown mode " + args[1]);
            }
        } catch (Exception e) {
            say("error " + e);
        } finally {
            c.close();
        }
        System.exit(0);
    }
}
