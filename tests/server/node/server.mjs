// Starts `pagoda serve` on a free port for the node client tests and stops it.
import { spawn } from "node:child_process";

export async function startServer(pagoda, args) {
  const server = spawn(pagoda, ["serve", "--port", "0", ...args], { stdio: ["ignore", "inherit", "pipe"] });
  const port = await new Promise((resolve, reject) => {
    let err = "";
    const timer = setTimeout(() => reject(new Error("server did not start:\n" + err)), 30000);
    server.stderr.on("data", (d) => {
      err += d.toString();
      process.stderr.write(d);
      const m = err.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    server.on("exit", (code) => reject(new Error(`server exited early (${code}):\n${err}`)));
  });
  return { server, port };
}

// SIGTERM; resolves to the exit code.
export function stopServer(server) {
  return new Promise((resolve) => {
    server.removeAllListeners("exit");
    server.on("exit", (code) => resolve(code));
    server.kill("SIGTERM");
  });
}
