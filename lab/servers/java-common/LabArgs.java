// The lab-server command line, as every lab server of ours takes it (tparams/program_cli.py,
// role lab-server; lab/servers/common in Rust, lab/servers/golab in Go), for the Java servers:
//   ip:port --cert=C --key=K [--<transport parameter with dashes>=N ...]
//       [--alpn=h3,... --cid-length=N --datagrams=true|false --disable-active-migration
//        --active-connection-id-limit=N --preferred-address=ip:port --retry]
// Each flag has one spelling, with two dashes; a value follows '=' or comes as the next
// argument. A flag the library cannot honour is refused in one line with status 2.
// Compiled into each Java server (its pom's compileSourceRoots).

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

final class LabArgs {
    static final List<String> VALUED = List.of("cert", "key", "max-idle-timeout", "initial-max-data",
            "initial-max-stream-data-bidi-local", "initial-max-stream-data-bidi-remote", "initial-max-stream-data-uni",
            "initial-max-streams-bidi", "initial-max-streams-uni", "alpn", "cid-length", "datagrams",
            "active-connection-id-limit", "preferred-address");
    static final List<String> SWITCHES = List.of("disable-active-migration", "retry");

    final String host;
    final int port;
    private final Map<String, String> given;

    private LabArgs(String host, int port, Map<String, String> given) {
        this.host = host;
        this.port = port;
        this.given = given;
    }

    /** The command line of {@code library}'s server, which honours the flags in {@code honoured}
     *  (besides the address, --cert and --key). */
    static LabArgs parse(String library, String[] args, Set<String> honoured) {
        Map<String, String> given = new HashMap<>();
        String address = null;
        for (int i = 0; i < args.length; i++) {
            String arg = args[i];
            if (arg.equals("--help")) {
                usage();
                System.exit(0);
            }
            if (!arg.startsWith("--")) {
                if (address != null) refuse("unexpected argument " + arg);
                address = arg;
                continue;
            }
            String[] nameValue = arg.substring(2).split("=", 2);
            String name = nameValue[0];
            if (SWITCHES.contains(name) && nameValue.length == 1) {
                given.put(name, "");
            } else if (VALUED.contains(name)) {
                if (nameValue.length == 2) given.put(name, nameValue[1]);
                else if (i + 1 < args.length) given.put(name, args[++i]);
                else refuse(arg + " needs a value");
            } else {
                refuse("unknown flag " + arg);
            }
        }
        if (address == null || !given.containsKey("cert") || !given.containsKey("key")) {
            refuse("usage: ip:port --cert=C --key=K [flags] (--help lists them)");
        }
        for (String name : given.keySet()) {
            if (!name.equals("cert") && !name.equals("key") && !honoured.contains(name)) {
                refuse(library + " cannot take --" + name);
            }
        }
        int colon = address.lastIndexOf(':');
        if (colon < 0) refuse("not an ip:port: " + address);
        String host = address.substring(0, colon).replaceAll("^\\[|\\]$", "");
        try {
            return new LabArgs(host, Integer.parseInt(address.substring(colon + 1)), given);
        } catch (NumberFormatException e) {
            refuse("not an ip:port: " + address);
            return null;
        }
    }

    boolean has(String name) {
        return given.containsKey(name);
    }

    String get(String name, String otherwise) {
        return given.getOrDefault(name, otherwise);
    }

    long number(String name) {
        try {
            return Long.parseLong(given.get(name));
        } catch (NumberFormatException e) {
            refuse("--" + name + " takes a number, not " + given.get(name));
            return 0;
        }
    }

    private static void usage() {
        System.out.println("usage: ip:port --cert=C --key=K [flags]");
        for (String name : VALUED) System.out.println("  --" + name + "=VALUE");
        for (String name : SWITCHES) System.out.println("  --" + name);
    }

    static void refuse(String message) {
        System.err.println("error: " + message);
        System.exit(2);
    }
}
