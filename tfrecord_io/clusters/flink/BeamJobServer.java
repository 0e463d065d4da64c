// Starts Beam's Flink job server (org.apache.beam.runners.flink.FlinkJobServerDriver) with its
// own arguments; with --exit-on-stdin-eof it also exits when its parent closes our stdin (so a
// test session that dies takes the job server with it).  Run with Java's single-file source
// mode by tfrecord_io.clusters.flink; nothing is built.
import java.util.ArrayList;
import java.util.List;
import org.apache.beam.runners.flink.FlinkJobServerDriver;

public class FlinkJobServer {
  public static void main(String[] args) throws Exception {
    List<String> rest = new ArrayList<>();
    boolean watchStdin = false;
    for (String arg : args) {
      if (arg.equals("--exit-on-stdin-eof")) {
        watchStdin = true;
      } else {
        rest.add(arg);
      }
    }
    if (watchStdin) {
      Thread watcher = new Thread(() -> {
        try {
          while (System.in.read() != -1) {
            // discard
          }
        } catch (java.io.IOException e) {
          // the pipe is gone: same as EOF
        }
        System.err.println("FlinkJobServer: stdin closed, exiting");
        System.exit(0);
      }, "stdin-eof-watcher");
      watcher.setDaemon(true);
      watcher.start();
    }
    FlinkJobServerDriver.main(rest.toArray(new String[0]));
  }
}
