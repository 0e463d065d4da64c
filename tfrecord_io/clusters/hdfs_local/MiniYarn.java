/*
 * Single-node YARN (one ResourceManager + one NodeManager) on loopback, next to the local HDFS.
 *
 * Started by tfrecord_io.clusters.hdfs_local.start_yarn with Java's single-file source mode:
 *
 *   java -cp "<jars>/*" MiniYarn.java --base DIR --default-fs hdfs://127.0.0.1:PORT \
 *       [--nm-memory-mb 6144] [--nm-vcores 4] [--min-allocation-mb 256] [--exit-on-stdin-eof]
 *       [--kerberos PRINCIPAL KEYTAB KRB5_CONF]
 *
 * Next to an HA or Kerberos HDFS the caller puts a directory with that HDFS's core-site.xml and
 * hdfs-site.xml first on the classpath: it is how the ResourceManager and NodeManager (and the
 * NodeManager's resource localizer, which reads its own configuration) find the nameservice and
 * the security settings.  --kerberos then runs both as PRINCIPAL (its keys in KEYTAB) and gives
 * every container KRB5_CONF (JAVA_TOOL_OPTIONS=-Djava.security.krb5.conf=..., KRB5_CONFIG=...),
 * as a real cluster's /etc/krb5.conf would; containers still run as the OS user (the default
 * container executor).
 *
 * The cluster is Hadoop's own MiniYARNCluster (hadoop-client-minicluster), which names its hosts
 * "localhost" and picks free ports.  It keeps its NodeManager's local and log dirs under
 * DIR/target/MiniYarn/ (container logs: DIR/target/MiniYarn/MiniYarn-logDir-nm-0_0/<app>/<container>/).
 * Once the NodeManager has registered with the ResourceManager, the addresses a client needs are
 * written atomically to DIR/yarn.json and a "READY {...}" line is printed.  SIGTERM/SIGINT (or EOF
 * on stdin with --exit-on-stdin-eof) stops the cluster and removes DIR/yarn.json.
 */

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.concurrent.CountDownLatch;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

import sun.misc.Signal;

public class MiniYarn {

    public static void main(String[] args) throws Exception {
        File base = null;
        String defaultFs = null;
        int nmMemoryMb = 6144;
        int nmVcores = 4;
        int minAllocationMb = 256;
        boolean exitOnStdinEof = false;
        String principal = null;
        String keytab = null;
        String krb5Conf = null;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--base": base = new File(args[++i]).getAbsoluteFile(); break;
                case "--default-fs": defaultFs = args[++i]; break;
                case "--nm-memory-mb": nmMemoryMb = Integer.parseInt(args[++i]); break;
                case "--nm-vcores": nmVcores = Integer.parseInt(args[++i]); break;
                case "--min-allocation-mb": minAllocationMb = Integer.parseInt(args[++i]); break;
                case "--exit-on-stdin-eof": exitOnStdinEof = true; break;
                case "--kerberos":
                    principal = args[++i];
                    keytab = args[++i];
                    krb5Conf = args[++i];
                    break;
                default: throw new IllegalArgumentException("unknown argument: " + args[i]);
            }
        }
        if (base == null || defaultFs == null) {
            throw new IllegalArgumentException("--base DIR and --default-fs URI are required");
        }

        Configuration conf = new YarnConfiguration();
        conf.set("fs.defaultFS", defaultFs);
        conf.set("hadoop.tmp.dir", new File(base, "tmp").getPath());
        // No capacity-scheduler.xml ships in the minicluster jar: one queue, root.default, all of it.
        conf.set("yarn.scheduler.capacity.root.queues", "default");
        conf.set("yarn.scheduler.capacity.root.default.capacity", "100");
        conf.set("yarn.scheduler.capacity.root.default.maximum-capacity", "100");
        conf.set("yarn.scheduler.capacity.root.default.state", "RUNNING");
        // Two applications' masters at once (the default 10% would hold a second one back).
        conf.set("yarn.scheduler.capacity.maximum-am-resource-percent", "0.5");
        // Resources: MiniYARNCluster reads the NodeManager's memory from its own key.
        conf.setInt("yarn.minicluster.yarn.nodemanager.resource.memory-mb", nmMemoryMb);
        conf.setInt("yarn.nodemanager.resource.memory-mb", nmMemoryMb);
        conf.setInt("yarn.nodemanager.resource.cpu-vcores", nmVcores);
        conf.setInt("yarn.scheduler.minimum-allocation-mb", minAllocationMb);
        conf.setInt("yarn.scheduler.maximum-allocation-mb", nmMemoryMb);
        conf.setInt("yarn.scheduler.maximum-allocation-vcores", nmVcores);
        // Containers' memory is not policed (MiniYARNCluster's default too): a JVM's virtual size
        // is far above its heap, and the machine is shared with the tests.
        conf.setBoolean("yarn.minicluster.control-resource-monitoring", false);
        conf.setBoolean("yarn.nodemanager.pmem-check-enabled", false);
        conf.setBoolean("yarn.nodemanager.vmem-check-enabled", false);
        // A fuller disk than a real cluster would accept must not mark the only node unhealthy.
        conf.setFloat("yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage",
                      99.0f);
        conf.setBoolean("yarn.log-aggregation-enable", false);
        conf.setBoolean("yarn.timeline-service.enabled", false);
        // Finished applications' logs stay readable in the NodeManager's log dir (tests read them).
        conf.setInt("yarn.nodemanager.log.retain-seconds", 3 * 3600);
        conf.setInt("yarn.resourcemanager.max-completed-applications", 100);
        conf.setInt("yarn.nodemanager.container-manager.thread-count", 4);
        conf.setInt("yarn.resourcemanager.client.thread-count", 4);
        conf.setInt("yarn.resourcemanager.scheduler.client.thread-count", 4);

        if (principal != null) {
            conf.set("hadoop.security.authentication", "kerberos");
            conf.set("yarn.resourcemanager.principal", principal);
            conf.set("yarn.resourcemanager.keytab", keytab);
            conf.set("yarn.nodemanager.principal", principal);
            conf.set("yarn.nodemanager.keytab", keytab);
            conf.set("yarn.nodemanager.admin-env", "MALLOC_ARENA_MAX=$MALLOC_ARENA_MAX,"
                    + "JAVA_TOOL_OPTIONS=-Djava.security.krb5.conf=" + krb5Conf + ","
                    + "KRB5_CONFIG=" + krb5Conf);
            UserGroupInformation.setConfiguration(conf);
            UserGroupInformation.loginUserFromKeytab(principal, keytab);
        }

        CountDownLatch stop = new CountDownLatch(1);
        Signal.handle(new Signal("TERM"), sig -> stop.countDown());
        Signal.handle(new Signal("INT"), sig -> stop.countDown());

        // MiniYARNCluster puts its work dir at ./target/<name>: the caller runs us in DIR.
        MiniYARNCluster cluster = new MiniYARNCluster("MiniYarn", 1, 1, 1);
        cluster.init(conf);
        cluster.start();
        if (!cluster.waitForNodeManagersToConnect(120_000)) {
            throw new IOException("the NodeManager did not register with the ResourceManager in 120 s");
        }

        Configuration live = cluster.getConfig();
        long pid = ProcessHandle.current().pid();
        String json = String.format(
                "{\"pid\": %d, \"rm_address\": \"%s\", \"scheduler_address\": \"%s\", "
                        + "\"resource_tracker_address\": \"%s\", \"admin_address\": \"%s\", "
                        + "\"webapp_address\": \"%s\", \"nm_address\": \"%s\", \"work_dir\": \"%s\", "
                        + "\"nm_memory_mb\": %d, \"nm_vcores\": %d, \"min_allocation_mb\": %d, "
                        + "\"principal\": %s}",
                pid,
                live.get(YarnConfiguration.RM_ADDRESS),
                live.get(YarnConfiguration.RM_SCHEDULER_ADDRESS),
                live.get(YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS),
                live.get(YarnConfiguration.RM_ADMIN_ADDRESS),
                live.get(YarnConfiguration.RM_WEBAPP_ADDRESS),
                cluster.getNodeManager(0).getNMContext().getNodeId().toString(),
                cluster.getTestWorkDir().getAbsolutePath().replace("\\", "/").replace("\"", ""),
                nmMemoryMb, nmVcores, minAllocationMb,
                principal == null ? "null" : "\"" + principal + "\"");
        Path state = base.toPath().resolve("yarn.json");
        Path tmp = base.toPath().resolve("yarn.json.tmp");
        Files.write(tmp, json.getBytes(StandardCharsets.UTF_8));
        Files.move(tmp, state, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        System.out.println("READY " + json);
        System.out.flush();

        if (exitOnStdinEof) {
            Thread watcher = new Thread(() -> {
                try (InputStream in = System.in) {
                    byte[] buf = new byte[256];
                    while (in.read(buf) >= 0) { /* discard */ }
                } catch (IOException e) {
                    // treat as EOF
                }
                System.out.println("MiniYarn: stdin closed");
                stop.countDown();
            }, "miniyarn-stdin-watch");
            watcher.setDaemon(true);
            watcher.start();
        }
        stop.await();
        System.out.println("MiniYarn: shutting down");
        System.out.flush();
        Files.deleteIfExists(state);
        cluster.stop();
        System.out.println("MiniYarn: stopped");
        System.out.flush();
        System.exit(0);
    }
}
