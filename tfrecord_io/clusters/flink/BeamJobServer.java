// Starts one of Beam's job servers (its main class is the first argument: e.g.
// org.apache.beam.runners.flink.FlinkJobServerDriver) with the remaining arguments; with
// --exit-on-stdin-eof it also exits when its parent closes our stdin (so a test session that
// dies takes the job server with it).  Run with Java's single-file source mode by
// tfrecord_io.clusters.flink; nothing is built.
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;

public class BeamJobServer {
  public static void main(String[] args) throws Exception {
    if (args.length == 0) {
      throw new IllegalArgumentException("usage: BeamJobServer MAIN_CLASS [--exit-on-stdin-eof] ARGS...");
    }
    List<String> rest = new ArrayList<>();
    boolean watchStdin = false;
    for (int i = 1; i < args.length; i++) {
      if (args[i].equals("--exit-on-stdin-eof")) {
        watchStdin = true;
      } else {
        rest.add(args[i]);
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
        System.err.println("BeamJobServer: stdin closed, exiting");
        System.exit(0);
      }, "stdin-eof-watcher");
      watcher.setDaemon(true);
      watcher.start();
    }
    Method main = Class.forName(args[0]).getMethod("main", String[].class);
    main.invoke(null, (Object) rest.toArray(new String[0]));
  }
}
