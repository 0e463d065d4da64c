/*
 * Single-node HDFS (one NameNode + one DataNode) on 127.0.0.1, for tests and trying things out.
 *
 * Started by tfrecord_io.hdfs_local with Java's single-file source mode:
 *
 *   java -cp "<jars>/*" MiniHdfs.java --base DIR [--port N] [--http-port N] [--exit-on-stdin-eof]
 *
 * Ports default to 0 (the OS picks free ones).  Once the cluster is up (NameNode out of safe
 * mode, DataNode registered) the chosen addresses are written atomically to DIR/cluster.json and a
 * "READY {...}" line is printed; the caller still polls the NameNode's JMX before trusting it.
 * SIGTERM/SIGINT (or EOF on stdin with --exit-on-stdin-eof) shuts the cluster down cleanly and
 * removes DIR/cluster.json.  Every start formats a fresh namespace in DIR/data.
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
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.security.UserGroupInformation;

import sun.misc.Signal;

public class MiniHdfs {

    public static void main(String[] args) throws Exception {
        File base = null;
        int port = 0;
        int httpPort = 0;
        long blockSize = 1024L * 1024L;
        boolean exitOnStdinEof = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--base": base = new File(args[++i]).getAbsoluteFile(); break;
                case "--port": port = Integer.parseInt(args[++i]); break;
                case "--http-port": httpPort = Integer.parseInt(args[++i]); break;
                case "--block-size": blockSize = Long.parseLong(args[++i]); break;
                case "--exit-on-stdin-eof": exitOnStdinEof = true; break;
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
        conf.setInt("dfs.replication", 1);
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

        // Stop on SIGTERM/SIGINT by shutting the cluster down from main(), not from a JVM shutdown
        // hook: Hadoop's own ShutdownHookManager refuses hook changes once the JVM is exiting.
        CountDownLatch stop = new CountDownLatch(1);
        Signal.handle(new Signal("TERM"), sig -> stop.countDown());
        Signal.handle(new Signal("INT"), sig -> stop.countDown());

        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf)
                .numDataNodes(1)
                .storagesPerDatanode(1)
                .nameNodePort(port)
                .nameNodeHttpPort(httpPort)
                .checkDataNodeHostConfig(true)
                .format(true)
                .manageNameDfsDirs(true)
                .manageDataDfsDirs(true)
                .waitSafeMode(true)
                .build();

        cluster.waitActive();
        cluster.waitClusterUp();

        int rpcPort = cluster.getNameNodePort();
        int webPort = cluster.getNameNode().getHttpAddress().getPort();
        String user = UserGroupInformation.getCurrentUser().getShortUserName();
        long pid = ProcessHandle.current().pid();
        String json = String.format(
                "{\"pid\": %d, \"port\": %d, \"http_port\": %d, \"user\": \"%s\"}",
                pid, rpcPort, webPort, user.replace("\"", ""));
        Path state = base.toPath().resolve("cluster.json");
        Path tmp = base.toPath().resolve("cluster.json.tmp");
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
                System.out.println("MiniHdfs: stdin closed");
                stop.countDown();
            }, "minihdfs-stdin-watch");
            watcher.setDaemon(true);
            watcher.start();
        }
        stop.await();
        System.out.println("MiniHdfs: shutting down");
        System.out.flush();
        cluster.shutdown();
        Files.deleteIfExists(state);
        System.out.println("MiniHdfs: stopped");
        System.out.flush();
        System.exit(0);
    }
}
