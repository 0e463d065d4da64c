/*
 * A local HDFS on 127.0.0.1 for tests and trying things out: by default one NameNode + one
 * DataNode; optionally N DataNodes, two NameNodes in one HA nameservice, and Kerberos (a KDC in
 * the same JVM, the cluster in secure mode).
 *
 * Started by tfrecord_io.clusters.hdfs_local with Java's single-file source mode:
 *
 *   java -cp "<jars>/*" MiniHdfs.java --base DIR [--port N] [--http-port N] [--block-size B]
 *       [--datanodes N] [--replication R] [--ha]
 *       [--kerberos [--data-protection authentication|integrity|privacy] [--ticket-lifetime S]]
 *       [--exit-on-stdin-eof]
 *
 * Ports default to 0 (the OS picks free ones; with --ha both NameNodes always get free ones).
 * Once the cluster is up (NameNode out of safe mode, every DataNode registered; with --ha the
 * first NameNode made active) its addresses are written atomically to DIR/cluster.json and a
 * "READY {...}" line is printed; the caller still polls the NameNode's JMX before trusting it.
 * SIGTERM/SIGINT (or EOF on stdin with --exit-on-stdin-eof) shuts the cluster down cleanly and
 * removes DIR/cluster.json.  Every start formats a fresh namespace in DIR/data.
 *
 * Control channel: another process asks for an action by writing DIR/control/<id>.request (one
 * line: "failover" or "stop-datanode <index>"; written under another name and renamed, so it is
 * never read half written).  The JVM polls the directory, runs one action at a time, rewrites
 * cluster.json, and answers in DIR/control/<id>.response, a JSON object: {"ok": true, ...} or
 * {"ok": false, "error": "..."}.
 *
 * --kerberos: a MiniKdc (Apache Kerby) on 127.0.0.1 over TCP, realm EXAMPLE.COM, and in
 * DIR/kerberos: krb5.conf (for this JVM and for MIT Kerberos clients), hdfs.keytab (the services'
 * principals hdfs/localhost, HTTP/localhost and, for a YARN next to it, yarn/localhost),
 * <user>.keytab and <user>.ccache (the OS user's principal and a ticket for it), expired.ccache
 * (a ticket of that user that has run out), guest.keytab (an ordinary user the NameNode admits,
 * whom HDFS permissions apply to) and rejected.keytab (a principal the KDC knows but the
 * NameNode does not authorize).
 */

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.DFSTestUtil;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.MiniDFSNNTopology;
import org.apache.hadoop.hdfs.protocol.DatanodeID;
import org.apache.hadoop.hdfs.server.blockmanagement.BlockManagerTestUtil;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.hadoop.hdfs.server.namenode.FSNamesystem;
import org.apache.hadoop.hdfs.server.namenode.NameNode;
import org.apache.hadoop.hdfs.server.namenode.NameNodeAdapter;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.kerby.KOptions;
import org.apache.kerby.kerberos.kerb.client.KrbClient;
import org.apache.kerby.kerberos.kerb.client.KrbOption;
import org.apache.kerby.kerberos.kerb.type.ticket.TgtTicket;

import sun.misc.Signal;

public class MiniHdfs {

    /** The host name in the service principals: what both the Java servers and clients (and
     *  MIT Kerberos, with dns_canonicalize_hostname = false) call 127.0.0.1. */
    static final String HOST = "localhost";

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable e) {
            // Exit even though the KDC's or the cluster's non-daemon threads would keep us alive.
            e.printStackTrace(System.out);
            System.out.flush();
            System.exit(1);
        }
    }

    static void run(String[] args) throws Exception {
        File base = null;
        int port = 0;
        int httpPort = 0;
        long blockSize = 1024L * 1024L;
        int dataNodes = 1;
        int replication = 1;
        boolean ha = false;
        boolean kerberos = false;
        String protection = "authentication";
        int ticketLifetime = 24 * 3600;
        boolean exitOnStdinEof = false;
        java.util.Map<String, String> extraConf = new java.util.LinkedHashMap<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--base": base = new File(args[++i]).getAbsoluteFile(); break;
                case "--port": port = Integer.parseInt(args[++i]); break;
                case "--http-port": httpPort = Integer.parseInt(args[++i]); break;
                case "--block-size": blockSize = Long.parseLong(args[++i]); break;
                case "--datanodes": dataNodes = Integer.parseInt(args[++i]); break;
                case "--replication": replication = Integer.parseInt(args[++i]); break;
                case "--ha": ha = true; break;
                case "--kerberos": kerberos = true; break;
                case "--data-protection": protection = args[++i]; break;
                case "--ticket-lifetime": ticketLifetime = Integer.parseInt(args[++i]); break;
                case "--exit-on-stdin-eof": exitOnStdinEof = true; break;
                case "--conf": {
                    String setting = args[++i];
                    int eq = setting.indexOf('=');
                    if (eq < 1) {
                        throw new IllegalArgumentException("--conf expects KEY=VALUE, got " + setting);
                    }
                    extraConf.put(setting.substring(0, eq), setting.substring(eq + 1));
                    break;
                }
                default: throw new IllegalArgumentException("unknown argument: " + args[i]);
            }
        }
        if (base == null) {
            throw new IllegalArgumentException("--base DIR is required");
        }
        // A fresh, formatted namespace on every start (MiniDFSCluster does not keep its storage
        // across shutdowns anyway).
        File data = new File(base, "data");

        Configuration conf = new HdfsConfiguration();
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, data.getPath());
        conf.set("hadoop.tmp.dir", new File(base, "tmp").getPath());
        conf.setBoolean("dfs.permissions.enabled", true);
        conf.setInt("dfs.replication", replication);
        conf.setBoolean("dfs.webhdfs.enabled", true);
        // Loopback only; the DataNode advertises 127.0.0.1 so WebHDFS redirects resolve.
        conf.set("dfs.datanode.hostname", "127.0.0.1");
        conf.set("dfs.namenode.http-address", "127.0.0.1:" + httpPort);
        conf.set("dfs.namenode.https-address", "127.0.0.1:0");
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        // The default 100 MB NameNode resource reservation puts a small disk into safe mode.
        conf.setLong("dfs.namenode.resource.du.reserved", 1024L * 1024L);
        conf.setInt("dfs.namenode.safemode.extension", 0);
        // Small blocks by default (--block-size), so that multi-MB test files span several blocks.
        conf.setLong("dfs.blocksize", blockSize);
        conf.setInt("dfs.namenode.handler.count", 4);
        conf.setInt("dfs.datanode.handler.count", 4);
        extraConf.forEach(conf::set);  // --conf KEY=VALUE, last: the caller's settings win
        if (ha) {
            // The standby reads the shared edits every second (so it is close behind when it takes
            // over) and never checkpoints: uploading an image to the active is HTTP (SPNEGO with
            // --kerberos) traffic nobody here needs.
            conf.setInt("dfs.ha.tail-edits.period", 1);
            conf.setBoolean("dfs.ha.standby.checkpoints", false);
        }

        // The caller empties data/, control/ and kerberos/ before every start.
        Files.createDirectories(base.toPath().resolve("control"));
        Kerberos krb = kerberos
                ? Kerberos.start(new File(base, "kerberos"), protection, ticketLifetime, conf)
                : null;

        // Stop on SIGTERM/SIGINT by shutting the cluster down from main(), not from a JVM shutdown
        // hook: Hadoop's own ShutdownHookManager refuses hook changes once the JVM is exiting.
        CountDownLatch stop = new CountDownLatch(1);
        Signal.handle(new Signal("TERM"), sig -> stop.countDown());
        Signal.handle(new Signal("INT"), sig -> stop.countDown());

        MiniDFSCluster.Builder builder = new MiniDFSCluster.Builder(conf)
                .numDataNodes(dataNodes)
                .storagesPerDatanode(1)
                .checkDataNodeHostConfig(true)
                .format(true)
                .manageNameDfsDirs(true)
                .manageDataDfsDirs(true)
                .waitSafeMode(true);
        if (ha) {
            builder.nnTopology(MiniDFSNNTopology.simpleHATopology());
        } else {
            builder.nameNodePort(port).nameNodeHttpPort(httpPort);
        }
        MiniDFSCluster cluster = builder.build();
        Cluster local = new Cluster(base, cluster, ha, krb);
        if (ha) {
            cluster.transitionToActive(0);
        }
        cluster.waitActive();
        cluster.waitClusterUp();
        local.waitOutOfSafeMode(0);
        local.recordDataNodes();

        String json = local.writeState();
        System.out.println("READY " + json);
        System.out.flush();

        Thread controller = new Thread(local::serveControl, "minihdfs-control");
        controller.setDaemon(true);
        controller.start();
        if (exitOnStdinEof) {
            Thread watcher = new Thread(() -> {
                try (InputStream in = System.in) {
                    byte[] buf = new byte[256];
                    while (in.read(buf) >= 0) { /* discard */ }
                } catch (IOException e) {
                    // treat as EOF
                }
                System.out.println("MiniHdfs: stdin closed");
                stop.countDown();
            }, "minihdfs-stdin-watch");
            watcher.setDaemon(true);
            watcher.start();
        }
        stop.await();
        System.out.println("MiniHdfs: shutting down");
        System.out.flush();
        synchronized (local) {  // not in the middle of a failover
            cluster.shutdown();
        }
        if (krb != null) {
            krb.kdc.stop();
        }
        Files.deleteIfExists(base.toPath().resolve("cluster.json"));
        System.out.println("MiniHdfs: stopped");
        System.out.flush();
        System.exit(0);
    }

    /** The running cluster, what cluster.json says about it, and the control channel's actions. */
    static final class Cluster {
        final File base;
        final MiniDFSCluster cluster;
        final boolean ha;
        final Kerberos krb;
        final String user;
        final String nameservice;                 // with --ha, else null
        final boolean[] nameNodeUp;
        final String[] rpcAddress;                // by NameNode; a restarted one keeps its ports
        final String[] httpAddress;
        int active = 0;
        final List<String> dataNodeAddresses = new ArrayList<>();  // by index, as started
        final List<Boolean> dataNodeAlive = new ArrayList<>();

        Cluster(File base, MiniDFSCluster cluster, boolean ha, Kerberos krb) throws IOException {
            this.base = base;
            this.cluster = cluster;
            this.ha = ha;
            this.krb = krb;
            this.user = UserGroupInformation.getCurrentUser().getShortUserName();
            int n = cluster.getNumNameNodes();
            this.nameservice = ha ? cluster.getNameNodeInfos()[0].getNameserviceId() : null;
            this.nameNodeUp = new boolean[n];
            this.rpcAddress = new String[n];
            this.httpAddress = new String[n];
            for (int i = 0; i < n; i++) {
                NameNode nn = cluster.getNameNode(i);
                nameNodeUp[i] = true;
                rpcAddress[i] = "127.0.0.1:" + nn.getNameNodeAddress().getPort();
                httpAddress[i] = "127.0.0.1:" + nn.getHttpAddress().getPort();
            }
        }

        void recordDataNodes() {
            for (DataNode dn : cluster.getDataNodes()) {
                dataNodeAddresses.add(dn.getDatanodeId().getXferAddr());
                dataNodeAlive.add(true);
            }
        }

        String nameNodeId(int i) {
            return "nn" + (i + 1);  // MiniDFSNNTopology's names (a single NameNode has none)
        }

        synchronized String writeState() throws IOException {
            Map<String, Object> state = new LinkedHashMap<>();
            state.put("pid", ProcessHandle.current().pid());
            // The active NameNode's ports.
            state.put("port", Integer.parseInt(rpcAddress[active].split(":")[1]));
            state.put("http_port", Integer.parseInt(httpAddress[active].split(":")[1]));
            state.put("user", user);
            if (ha) {
                state.put("nameservice", nameservice);
            }
            List<Object> nameNodes = new ArrayList<>();
            for (int i = 0; i < nameNodeUp.length; i++) {
                Map<String, Object> nn = new LinkedHashMap<>();
                nn.put("id", nameNodeId(i));
                nn.put("rpc_address", rpcAddress[i]);
                nn.put("http_address", httpAddress[i]);
                nn.put("state", !nameNodeUp[i] ? "stopped" : i == active ? "active" : "standby");
                nameNodes.add(nn);
            }
            state.put("namenodes", nameNodes);
            List<Object> dataNodes = new ArrayList<>();
            for (int i = 0; i < dataNodeAddresses.size(); i++) {
                Map<String, Object> dn = new LinkedHashMap<>();
                dn.put("index", i);
                dn.put("address", dataNodeAddresses.get(i));
                dn.put("alive", dataNodeAlive.get(i));
                dataNodes.add(dn);
            }
            state.put("datanodes", dataNodes);
            state.put("replication", cluster.getConfiguration(0).getInt("dfs.replication", 1));
            if (krb != null) {
                state.put("kerberos", krb.description);
            }
            String json = Json.write(state);
            writeAtomically(base.toPath().resolve("cluster.json"), json);
            return json;
        }

        /** Poll DIR/control for requests and answer each (see the comment at the top). */
        void serveControl() {
            Path dir = base.toPath().resolve("control");
            while (true) {
                List<Path> requests = new ArrayList<>();
                try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir, "*.request")) {
                    ds.forEach(requests::add);
                } catch (IOException e) {
                    System.out.println("MiniHdfs: cannot list " + dir + ": " + e);
                }
                requests.sort(null);
                for (Path request : requests) {
                    String name = request.getFileName().toString();
                    Path response = dir.resolve(name.replaceFirst("\\.request$", ".response"));
                    String answer;
                    try {
                        String command = Files.readString(request).trim();
                        Files.delete(request);
                        System.out.println("MiniHdfs: control: " + command);
                        answer = Json.write(run(command));
                    } catch (Exception e) {
                        e.printStackTrace(System.out);
                        Map<String, Object> error = new LinkedHashMap<>();
                        error.put("ok", false);
                        error.put("error", String.valueOf(e.getMessage()).split("\n")[0]);
                        answer = Json.write(error);
                    }
                    System.out.println("MiniHdfs: control: " + answer);
                    try {
                        writeAtomically(response, answer);
                    } catch (IOException e) {
                        System.out.println("MiniHdfs: cannot answer " + response + ": " + e);
                    }
                }
                try {
                    Thread.sleep(100);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }

        Map<String, Object> run(String command) throws Exception {
            String[] words = command.split("\\s+");
            if (words.length == 1 && words[0].equals("failover")) {
                return failover();
            }
            if (words.length == 2 && words[0].equals("stop-datanode")) {
                return stopDataNode(Integer.parseInt(words[1]));
            }
            throw new IllegalArgumentException("unknown control command: " + command);
        }

        /**
         * Make the standby NameNode active and shut the active one down.  When the other one is
         * already down (after an earlier failover) it is started again first, as a standby, and
         * waited for until every live DataNode has registered with it.
         */
        synchronized Map<String, Object> failover() throws Exception {
            if (!ha) {
                throw new IllegalStateException(
                        "this cluster has a single NameNode; start it with --ha to fail over");
            }
            long started = System.nanoTime();
            int from = active;
            int to = 1 - from;
            boolean restarted = !nameNodeUp[to];
            if (restarted) {
                cluster.restartNameNode(to, false);
                nameNodeUp[to] = true;
                cluster.waitActive(to);
            }
            cluster.shutdownNameNode(from);
            nameNodeUp[from] = false;
            cluster.transitionToActive(to);
            active = to;
            waitOutOfSafeMode(to);
            writeState();
            Map<String, Object> result = new LinkedHashMap<>();
            result.put("ok", true);
            result.put("active", nameNodeId(to));
            result.put("previous", nameNodeId(from));
            result.put("restarted_previous_standby", restarted);
            result.put("seconds", (System.nanoTime() - started) / 1e9);
            return result;
        }

        /** Stop one DataNode and have every running NameNode count it dead at once (rather than
         *  after the heartbeat expiry of about ten minutes). */
        synchronized Map<String, Object> stopDataNode(int index) throws Exception {
            if (index < 0 || index >= dataNodeAddresses.size()) {
                throw new IllegalArgumentException("no DataNode " + index + "; this cluster has "
                        + dataNodeAddresses.size() + " (indexes 0 to "
                        + (dataNodeAddresses.size() - 1) + ")");
            }
            if (!dataNodeAlive.get(index)) {
                throw new IllegalStateException("DataNode " + index + " is already stopped");
            }
            long started = System.nanoTime();
            String address = dataNodeAddresses.get(index);
            DatanodeID id = null;
            for (DataNode dn : cluster.getDataNodes()) {
                if (dn.getDatanodeId().getXferAddr().equals(address)) {
                    id = dn.getDatanodeId();
                }
            }
            cluster.stopDataNode(address);
            dataNodeAlive.set(index, false);
            for (int i = 0; i < nameNodeUp.length; i++) {
                if (nameNodeUp[i]) {
                    FSNamesystem ns = cluster.getNamesystem(i);
                    DFSTestUtil.setDatanodeDead(NameNodeAdapter.getDatanode(ns, id));
                    BlockManagerTestUtil.checkHeartbeat(ns.getBlockManager());
                }
            }
            writeState();
            Map<String, Object> result = new LinkedHashMap<>();
            result.put("ok", true);
            result.put("index", index);
            result.put("address", address);
            result.put("seconds", (System.nanoTime() - started) / 1e9);
            return result;
        }

        void waitOutOfSafeMode(int nn) throws InterruptedException {
            long deadline = System.nanoTime() + 120_000_000_000L;
            while (cluster.getNameNode(nn).isInSafeMode()) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException(
                            nameNodeId(nn) + " stayed in safe mode for 120 s");
                }
                Thread.sleep(100);
            }
        }
    }

    /** The KDC, the principals and the secure-mode settings of a --kerberos cluster. */
    static final class Kerberos {
        final MiniKdc kdc;
        /** What cluster.json says about it: realm, KDC, principals, keytabs, ticket caches. */
        final Map<String, Object> description = new LinkedHashMap<>();

        private Kerberos(MiniKdc kdc) {
            this.kdc = kdc;
        }

        static Kerberos start(File dir, String protection, int ticketLifetime,
                              Configuration conf) throws Exception {
            Files.createDirectories(dir.toPath());
            Properties kdcConf = MiniKdc.createConf();
            kdcConf.setProperty(MiniKdc.KDC_BIND_ADDRESS, "127.0.0.1");
            kdcConf.setProperty(MiniKdc.TRANSPORT, "TCP");
            // Kerby refuses tickets shorter than its minimum lifetime (default 3600): allow the 1 s
            // one of expired.ccache, and the user's ticketLifetime (seconds) up to the maximum.
            kdcConf.setProperty(MiniKdc.MIN_TICKET_LIFETIME, "1");
            kdcConf.setProperty(MiniKdc.MAX_TICKET_LIFETIME,
                    Long.toString(Math.max(ticketLifetime, 24 * 3600)));
            MiniKdc kdc = new MiniKdc(kdcConf, new File(dir, "kdc"));
            kdc.start();
            Kerberos krb = new Kerberos(kdc);
            krb.setUp(dir, protection, ticketLifetime, conf);
            return krb;
        }

        private void setUp(File dir, String protection, int ticketLifetime, Configuration conf)
                throws Exception {
            String realm = kdc.getRealm();
            String osUser = System.getProperty("user.name");
            String service = "hdfs/" + HOST + "@" + realm;
            String http = "HTTP/" + HOST + "@" + realm;
            String yarn = "yarn/" + HOST + "@" + realm;
            String principal = osUser + "@" + realm;
            String rejected = "intruder@" + realm;
            String guest = "guest@" + realm;
            File serviceKeytab = new File(dir, "hdfs.keytab");
            File userKeytab = new File(dir, osUser + ".keytab");
            File rejectedKeytab = new File(dir, "rejected.keytab");
            File guestKeytab = new File(dir, "guest.keytab");
            kdc.createPrincipal(serviceKeytab, "hdfs/" + HOST, "HTTP/" + HOST, "yarn/" + HOST);
            kdc.createPrincipal(guestKeytab, "guest");
            kdc.createPrincipal(userKeytab, osUser);
            kdc.createPrincipal(rejectedKeytab, "intruder");

            // One krb5.conf for this JVM and for clients: TCP only (the KDC listens on nothing
            // else), no DNS (principals name the host "localhost", as written).
            File krb5Conf = new File(dir, "krb5.conf");
            writeAtomically(krb5Conf.toPath(), String.join("\n",
                    "[libdefaults]",
                    "    default_realm = " + realm,
                    "    udp_preference_limit = 1",
                    "    dns_lookup_kdc = false",
                    "    dns_lookup_realm = false",
                    "    dns_canonicalize_hostname = false",
                    "    rdns = false",
                    "    forwardable = true",
                    "[realms]",
                    "    " + realm + " = {",
                    "        kdc = 127.0.0.1:" + kdc.getPort(),
                    "    }",
                    "[domain_realm]",
                    "    localhost = " + realm,
                    ""));
            System.setProperty("java.security.krb5.conf", krb5Conf.getPath());

            // Tickets for the user, obtained here with Kerby's client (no kinit needed): one that
            // is valid for ticketLifetime, one that has run out by the time the cluster is up.
            KrbClient client = new KrbClient();
            client.setKdcRealm(realm);
            client.setKdcHost("127.0.0.1");
            client.setKdcTcpPort(kdc.getPort());
            client.setAllowUdp(false);
            client.setAllowTcp(true);
            client.init();
            File ticketCache = new File(dir, osUser + ".ccache");
            File expiredCache = new File(dir, "expired.ccache");
            long expires = storeTicket(client, principal, userKeytab, ticketLifetime, ticketCache);
            storeTicket(client, principal, userKeytab, 1, expiredCache);

            // The services' short name is the OS user (HDFS's and YARN's, which run containers
            // as the OS user), so that the user's principal is the HDFS superuser, as the OS user
            // is on the cluster without Kerberos.
            String at = "/" + HOST + "@" + realm.replace(".", "\\.");
            String authToLocal = String.join("\n",
                    "RULE:[2:$1/$2@$0](hdfs" + at + ")s/.*/" + osUser + "/",
                    "RULE:[2:$1/$2@$0](yarn" + at + ")s/.*/" + osUser + "/",
                    "DEFAULT");
            conf.set("hadoop.security.authentication", "kerberos");
            conf.setBoolean("hadoop.security.authorization", true);
            conf.set("hadoop.security.auth_to_local", authToLocal);
            conf.set("hadoop.rpc.protection", protection);
            // Only the user and "guest" (an ordinary user: HDFS permissions apply to it) may call
            // the NameNode's client protocol ("rejected" may not).
            conf.set("security.client.protocol.acl", osUser + ",guest");
            conf.set("dfs.namenode.kerberos.principal", service);
            conf.set("dfs.namenode.keytab.file", serviceKeytab.getPath());
            conf.set("dfs.namenode.kerberos.internal.spnego.principal", http);
            conf.set("dfs.datanode.kerberos.principal", service);
            conf.set("dfs.datanode.keytab.file", serviceKeytab.getPath());
            conf.set("dfs.web.authentication.kerberos.principal", http);
            conf.set("dfs.web.authentication.kerberos.keytab", serviceKeytab.getPath());
            conf.setBoolean("dfs.block.access.token.enable", true);
            // SASL on the DataNodes' data transfer port, with the block token as the secret.
            conf.set("dfs.data.transfer.protection", protection);
            if (protection.equals("privacy")) {
                // Encrypt block data with AES after the SASL handshake, as production clusters
                // do: with SASL's own (DIGEST-MD5) encryption hdfs-native fails writing a file of
                // more than one block ("All nodes failed for write").
                conf.set("dfs.encrypt.data.transfer.cipher.suites", "AES/CTR/NoPadding");
            }
            // A secure DataNode on an unprivileged port refuses to start unless its HTTP is HTTPS
            // only, or this testing switch skips that check.  The switch does not turn SASL off:
            // the DataNode negotiates SASL on an unprivileged port whenever
            // dfs.data.transfer.protection is set (SaslDataTransferServer.receive), and a client
            // that does not is refused.  It keeps the web endpoints (JMX for readiness, WebHDFS)
            // on plain HTTP, with no keystore to make and no certificate for clients to trust.
            conf.setBoolean("ignore.secure.ports.for.testing", true);
            UserGroupInformation.setConfiguration(conf);

            description.put("realm", realm);
            description.put("kdc", "127.0.0.1:" + kdc.getPort());
            description.put("krb5_conf", krb5Conf.getPath());
            description.put("principal", principal);
            description.put("keytab", userKeytab.getPath());
            description.put("ticket_cache", ticketCache.getPath());
            description.put("ticket_expires", expires / 1000.0);
            description.put("expired_ticket_cache", expiredCache.getPath());
            description.put("rejected_principal", rejected);
            description.put("rejected_keytab", rejectedKeytab.getPath());
            description.put("guest_principal", guest);
            description.put("guest_keytab", guestKeytab.getPath());
            description.put("service_principal", service);
            description.put("yarn_principal", yarn);
            description.put("service_keytab", serviceKeytab.getPath());
            description.put("auth_to_local", authToLocal);
            description.put("protection", protection);
        }

        /** Get a ticket for principal from its keytab into a ticket cache; its end (epoch ms). */
        private static long storeTicket(KrbClient client, String principal, File keytab,
                                        int lifetime, File cache) throws Exception {
            KOptions options = new KOptions();
            options.add(KrbOption.CLIENT_PRINCIPAL, principal);
            options.add(KrbOption.USE_KEYTAB, true);
            options.add(KrbOption.KEYTAB_FILE, keytab);
            options.add(KrbOption.LIFE_TIME, lifetime);
            TgtTicket tgt = client.requestTgt(options);
            client.storeTicket(tgt, cache);
            return tgt.getEncKdcRepPart().getEndTime().getTime();
        }
    }

    static void writeAtomically(Path target, String text) throws IOException {
        Path tmp = target.resolveSibling(target.getFileName() + ".tmp");
        Files.write(tmp, text.getBytes(StandardCharsets.UTF_8));
        Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    /** Just enough JSON output for the state file and the control channel's answers. */
    static final class Json {
        static String write(Object value) {
            StringBuilder out = new StringBuilder();
            write(value, out);
            return out.toString();
        }

        private static void write(Object value, StringBuilder out) {
            if (value == null) {
                out.append("null");
            } else if (value instanceof Map) {
                out.append('{');
                String sep = "";
                for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
                    out.append(sep);
                    write(String.valueOf(e.getKey()), out);
                    out.append(": ");
                    write(e.getValue(), out);
                    sep = ", ";
                }
                out.append('}');
            } else if (value instanceof List) {
                out.append('[');
                String sep = "";
                for (Object item : (List<?>) value) {
                    out.append(sep);
                    write(item, out);
                    sep = ", ";
                }
                out.append(']');
            } else if (value instanceof Number || value instanceof Boolean) {
                out.append(value);
            } else {
                out.append('"');
                for (char c : value.toString().toCharArray()) {
                    if (c == '"' || c == '\\') {
                        out.append('\\').append(c);
                    } else if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
                out.append('"');
            }
        }
    }
}
