/**
 * Private Docker engines listening on loopback TCP with TLS client verification, for the fleet's tests:
 * certificates made with openssl (a CA, the engines' certificate for 127.0.0.1, a client certificate, and
 * a second CA that signed nothing the engines know), and one `dockerd` per engine with its own data root,
 * exec root, pidfile and port, no bridge and no iptables (as scripts/docker-up.sh starts one), each with
 * the registry-free host-/usr image imported.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { DockerEngine, type DockerTls } from '../docker/engine-api.js';
import { followProgress } from '../docker/images.js';

export interface TestCerts {
  /** What a client needs: the engines' CA, its certificate and key. */
  client: DockerTls;
  /** A CA that signed nothing here: an engine cannot be verified against it. */
  otherCa: string;
  /** A client certificate and key signed by `otherCa`, which the engines refuse. */
  stranger: { cert: string; key: string };
  dir: string;
}

function openssl(dir: string, args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
}

function ca(dir: string, name: string): void {
  openssl(dir, ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', `${name}-key.pem`, '-out', `${name}.pem`, '-days', '2', '-subj', `/CN=${name}`]);
}

function signed(dir: string, name: string, byCa: string, ext: string): void {
  writeFileSync(join(dir, `${name}.ext`), ext);
  openssl(dir, ['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', `${name}-key.pem`, '-out', `${name}.csr`, '-subj', `/CN=${name}`]);
  openssl(dir, ['x509', '-req', '-in', `${name}.csr`, '-CA', `${byCa}.pem`, '-CAkey', `${byCa}-key.pem`,
    '-CAcreateserial', '-out', `${name}.pem`, '-days', '2', '-extfile', `${name}.ext`]);
}

/** A CA, the engines' certificate (IP 127.0.0.1), a client certificate, and a stranger CA with its client. */
export function makeCerts(dir: string): TestCerts {
  mkdirSync(dir, { recursive: true });
  ca(dir, 'ca');
  signed(dir, 'server', 'ca', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  signed(dir, 'client', 'ca', 'extendedKeyUsage=clientAuth\n');
  ca(dir, 'other-ca');
  signed(dir, 'stranger', 'other-ca', 'extendedKeyUsage=clientAuth\n');
  const read = (f: string) => readFileSync(join(dir, f), 'utf8');
  return {
    client: { ca: read('ca.pem'), cert: read('client.pem'), key: read('client-key.pem') },
    otherCa: read('other-ca.pem'),
    stranger: { cert: read('stranger.pem'), key: read('stranger-key.pem') },
    dir,
  };
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  await new Promise((r) => server.close(r));
  return port;
}

/** One private engine; `stop` ends it (SIGTERM, as an operator stops one), `start` starts it again. */
export class TlsEngine {
  readonly dir: string;
  readonly host: string;
  #process: ChildProcess | undefined;
  #exited: Promise<void> = Promise.resolve();

  constructor(
    dir: string,
    port: number,
    private readonly certs: TestCerts,
  ) {
    this.dir = dir;
    this.host = `tcp://127.0.0.1:${port}`;
  }

  /** A client of this engine (the caller closes it). */
  client(): DockerEngine {
    return new DockerEngine({ host: this.host, tls: this.certs.client });
  }

  async start(): Promise<void> {
    mkdirSync(this.dir, { recursive: true });
    const c = this.certs.dir;
    const log = openSync(join(this.dir, 'dockerd.log'), 'a');
    const child = spawn(
      'dockerd',
      ['--iptables=false', '--ip6tables=false', '--bridge=none', '--ip-forward=false', '--ip-masq=false',
        '--storage-driver=overlay2', `--data-root=${this.dir}/data`, `--exec-root=${this.dir}/exec`,
        `--pidfile=${this.dir}/dockerd.pid`, '-H', this.host, '--tlsverify', `--tlscacert=${c}/ca.pem`,
        `--tlscert=${c}/server.pem`, `--tlskey=${c}/server-key.pem`],
      { stdio: ['ignore', log, log] },
    );
    this.#process = child;
    this.#exited = new Promise((r) => child.once('exit', () => r()));
    const engine = this.client();
    try {
      const deadline = Date.now() + 60_000;
      for (;;) {
        if (child.exitCode !== null) throw new Error(`dockerd exited (${child.exitCode}): ${this.logTail()}`);
        const up = await engine.ping(AbortSignal.timeout(2_000)).then(() => true, () => false);
        if (up) break;
        if (Date.now() > deadline) throw new Error(`dockerd at ${this.host} did not answer in 60 s: ${this.logTail()}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    } finally {
      await engine.close();
    }
  }

  logTail(): string {
    return readFileSync(join(this.dir, 'dockerd.log'), 'utf8').split('\n').slice(-8).join('\n');
  }

  /** SIGTERM, then wait for it to exit (it stops its containers first). */
  async stop(): Promise<void> {
    this.#process?.kill('SIGTERM');
    const killed = setTimeout(() => this.#process?.kill('SIGKILL'), 60_000);
    await this.#exited;
    clearTimeout(killed);
    this.#process = undefined;
  }

  /** Stop it and remove its folder (dockerd leaves its data root mounted on itself). */
  async remove(): Promise<void> {
    await this.stop();
    const mounts = readFileSync('/proc/self/mounts', 'utf8')
      .split('\n')
      .map((l) => l.split(' ')[1] ?? '')
      .filter((m) => m.startsWith(`${this.dir}/`))
      .sort((a, b) => b.length - a.length);
    for (const m of mounts) execFileSync('umount', ['-l', m], { stdio: 'ignore' });
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Starts `count` engines under `dir`, each with the host-/usr image imported. */
export async function startEngines(dir: string, certs: TestCerts, count: number): Promise<TlsEngine[]> {
  const engines: TlsEngine[] = [];
  for (let i = 0; i < count; i++) engines.push(new TlsEngine(join(dir, `e${i}`), await freePort(), certs));
  await Promise.all(engines.map((e) => e.start()));
  const image = baseImageTar(join(dir, 'image'));
  for (const e of engines) {
    const client = e.client();
    try {
      const stream = await client.stream('POST', '/images/create', {
        query: { fromSrc: '-', repo: 'vime/sandbox-base', tag: 'latest', changes: 'LABEL dev.vime.host-usr=true' },
        body: readFileSync(image),
        contentType: 'application/x-tar',
      });
      await followProgress(stream, `importing the base image into ${e.host}`);
    } finally {
      await client.close();
    }
  }
  return engines;
}

/** The registry-free image of scripts/docker-up.sh: folder stubs and /etc/passwd; the host's /usr is bound. */
function baseImageTar(dir: string): string {
  const tree = join(dir, 'tree');
  for (const d of ['usr', 'etc', 'proc', 'sys', 'dev', 'tmp', 'root', 'sbin', 'home/sandbox', 'var/tmp']) {
    mkdirSync(join(tree, d), { recursive: true });
  }
  execFileSync('chmod', ['1777', join(tree, 'tmp'), join(tree, 'var/tmp')]);
  for (const link of ['bin', 'lib', 'lib32', 'lib64', 'libx32']) {
    execFileSync('sh', ['-c', `[ -L /${link} ] && ln -s "$(readlink /${link})" ${tree}/${link} || true`]);
  }
  writeFileSync(join(tree, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\n');
  writeFileSync(join(tree, 'etc/group'), 'root:x:0:\nsandbox:x:1000:\n');
  execFileSync('chown', ['1000:1000', join(tree, 'home/sandbox')]);
  const tar = join(dir, 'base.tar');
  execFileSync('tar', ['-C', tree, '--numeric-owner', '-cf', tar, '.']);
  return tar;
}
