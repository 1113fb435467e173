/**
 * Images on disk turned into rootfs folders: layered archives in both formats (`docker save` and OCI
 * layout), made here with GNU tar, whose upper layer deletes a file (`.wh.<name>`) and makes a folder
 * opaque (`.wh..wh..opq`, listed before and after the layer's own entries there); hostile layers that try
 * to write out of the rootfs; the digest cache; and a bubblewrap sandbox over such an image.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bubblewrapProvider } from '../bubblewrap/provider.js';
import { HOST_USR_LABEL } from '../docker/provider.js';
import { readImageArchive } from './archive.js';
import { ImageStore } from './store.js';

const tmp = mkdtempSync(join(tmpdir(), 'vime-images-test-'));
chmodSync(tmp, 0o755);
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
let counter = 0;
const fresh = (name: string) => {
  const dir = join(tmp, `${name}-${counter++}`);
  mkdirSync(dir, { recursive: true });
  return dir;
};

type Entry = [path: string, content?: string | { link: string }];

/** A layer tar of exactly these entries, in this order (GNU tar, no recursion); folders end with `/`. */
function layer(entries: Entry[]): string {
  const src = fresh('layer-src');
  for (const [path, content] of entries) {
    const full = join(src, path);
    if (path.endsWith('/')) mkdirSync(full, { recursive: true });
    else {
      mkdirSync(join(full, '..'), { recursive: true });
      if (typeof content === 'object') symlinkSync(content.link, full);
      else writeFileSync(full, content ?? '');
    }
  }
  const out = join(fresh('layer'), 'layer.tar');
  const names = entries.map(([p]) => p.replace(/\/$/, ''));
  execFileSync('tar', ['-C', src, '--numeric-owner', '--no-recursion', '-cf', out, ...names]);
  return out;
}

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

interface ImageSpec {
  name: string;
  layers: string[];
  env?: string[] | undefined;
  labels?: Record<string, string> | undefined;
}

function configOf(spec: ImageSpec): Buffer {
  const diffIds = spec.layers.map((l) => `sha256:${sha256(readFileSync(l))}`);
  return Buffer.from(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      config: { Env: spec.env ?? ['PATH=/usr/bin:/bin'], Labels: spec.labels ?? {} },
      rootfs: { type: 'layers', diff_ids: diffIds },
    }),
  );
}

/** A `docker save` archive: manifest.json, the config, one folder per layer. */
function dockerSave(spec: ImageSpec, file: string): string {
  const dir = fresh('save');
  const config = configOf(spec);
  const configName = `${sha256(config)}.json`;
  writeFileSync(join(dir, configName), config);
  const layers = spec.layers.map((l, i) => {
    mkdirSync(join(dir, `l${i}`));
    execFileSync('cp', [l, join(dir, `l${i}`, 'layer.tar')]);
    return `l${i}/layer.tar`;
  });
  writeFileSync(
    join(dir, 'manifest.json'),
    JSON.stringify([{ Config: configName, RepoTags: [spec.name], Layers: layers }]),
  );
  execFileSync('tar', ['-C', dir, '-cf', file, '.']);
  return file;
}

/** An OCI image layout in a tar, layers gzip-compressed, named by a ref-name annotation. */
function ociArchive(spec: ImageSpec, file: string): string {
  const dir = fresh('oci');
  mkdirSync(join(dir, 'blobs/sha256'), { recursive: true });
  const blob = (data: Buffer) => {
    const hex = sha256(data);
    writeFileSync(join(dir, 'blobs/sha256', hex), data);
    return { digest: `sha256:${hex}`, size: data.length };
  };
  const config = blob(configOf(spec));
  const layers = spec.layers.map((l) => ({
    mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip',
    ...blob(execFileSync('gzip', ['-c', l])),
  }));
  const manifest = blob(
    Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
        layers,
      }),
    ),
  );
  writeFileSync(join(dir, 'oci-layout'), '{"imageLayoutVersion":"1.0.0"}');
  writeFileSync(
    join(dir, 'index.json'),
    JSON.stringify({
      schemaVersion: 2,
      manifests: [
        {
          mediaType: 'application/vnd.oci.image.manifest.v1+json',
          ...manifest,
          annotations: { 'org.opencontainers.image.ref.name': spec.name },
        },
      ],
    }),
  );
  execFileSync('tar', ['-C', dir, '-cf', file, 'oci-layout', 'index.json', 'blobs']);
  return file;
}

/** Every path under a folder (folders with a trailing `/`), sorted. */
function tree(root: string): string[] {
  const out = execFileSync('find', [root, '-mindepth', '1', '-printf', '%P %y\n'], { encoding: 'utf8' });
  return out
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [path, type] = line.split(' ');
      return type === 'd' ? `${path}/` : path!;
    })
    .sort();
}

const base = () =>
  layer([
    ['./'],
    ['etc/'],
    ['etc/keep.txt', 'keep'],
    ['etc/gone.txt', 'gone'],
    ['data/'],
    ['data/old.txt', 'old'],
    ['data/sub/'],
    ['data/sub/deep.txt', 'deep'],
    ['other/'],
    ['other/stays.txt', 'stays'],
  ]);

const EXPECTED = [
  'data/',
  'data/before.txt',
  'data/new.txt',
  'data/sub/',
  'data/sub/fresh.txt',
  'etc/',
  'etc/added.txt',
  'etc/keep.txt',
  'other/',
  'other/stays.txt',
];

describe('image layers onto a rootfs', () => {
  // The upper layer lists one file of the opaque folder before its marker and the rest after it.
  const upper = () =>
    layer([
      ['etc/'],
      ['etc/.wh.gone.txt'],
      ['etc/added.txt', 'added'],
      ['data/'],
      ['data/before.txt', 'listed before the marker'],
      ['data/.wh..wh..opq'],
      ['data/new.txt', 'new'],
      ['data/sub/'],
      ['data/sub/fresh.txt', 'fresh'],
    ]);

  for (const [format, make] of [
    ['docker save', dockerSave],
    ['OCI layout (gzip layers)', ociArchive],
  ] as const) {
    it(`applies whiteouts and opaque folders exactly (${format})`, async () => {
      const images = fresh('images');
      make({ name: 'test/layered:1', layers: [base(), upper()] }, join(images, 'layered.tar'));
      const store = new ImageStore({ cacheDir: fresh('cache'), imageDir: images, docker: false });
      const got = await store.rootfs('test/layered:1');
      expect(tree(got.rootfs)).toEqual(EXPECTED);
      expect(readFileSync(join(got.rootfs, 'data/before.txt'), 'utf8')).toBe('listed before the marker');
      expect(readFileSync(join(got.rootfs, 'etc/keep.txt'), 'utf8')).toBe('keep');
      expect(got.extracted).toBe(true);
      // The same image by every spelling of its name.
      expect((await store.rootfs('docker.io/test/layered:1')).rootfs).toBe(got.rootfs);
    });
  }

  it('keeps every write inside the rootfs: symlinked parents resolve inside, `..` stops at its root', async () => {
    const outside = fresh('outside');
    const images = fresh('images');
    const first = layer([
      ['evil', { link: outside }],
      ['up', { link: '../../../..' }],
    ]);
    // No folder entries for `evil` and `up`: one would replace the symlink (the last part is never followed).
    const second = layer([
      ['evil/pwned', 'x'],
      ['up/escaped', 'y'],
    ]);
    dockerSave({ name: 'test/hostile:1', layers: [first, second] }, join(images, 'hostile.tar'));
    const store = new ImageStore({ cacheDir: fresh('cache'), imageDir: images, docker: false });
    const got = await store.rootfs('test/hostile:1');
    expect(existsSync(join(outside, 'pwned'))).toBe(false);
    // `evil` pointed at an absolute host path: inside the rootfs that path is under the rootfs.
    expect(readFileSync(join(got.rootfs, outside, 'pwned'), 'utf8')).toBe('x');
    expect(readFileSync(join(got.rootfs, 'escaped'), 'utf8')).toBe('y');
    expect(existsSync(join(tmp, 'escaped'))).toBe(false);
  });
});

describe('the rootfs cache, by image digest', () => {
  it('extracts an image once; a changed image under the same name is extracted again', async () => {
    const images = fresh('images');
    const cacheDir = fresh('cache');
    const archive = join(images, 'app.tar');
    dockerSave({ name: 'test/app:1', layers: [layer([['app/'], ['app/version', 'one']])] }, archive);
    const first = await new ImageStore({ cacheDir, imageDir: images, docker: false }).rootfs('test/app:1');
    expect(first.extracted).toBe(true);
    // A mark left in the cached rootfs: a second use that extracted again would lose it.
    writeFileSync(join(first.rootfs, 'app/mark'), 'still here');
    const second = await new ImageStore({ cacheDir, imageDir: images, docker: false }).rootfs('test/app:1');
    expect(second.extracted).toBe(false);
    expect(second.rootfs).toBe(first.rootfs);
    expect(second.digest).toBe(first.digest);
    expect(readFileSync(join(second.rootfs, 'app/mark'), 'utf8')).toBe('still here');

    dockerSave({ name: 'test/app:1', layers: [layer([['app/'], ['app/version', 'two']])] }, archive);
    const changed = await new ImageStore({ cacheDir, imageDir: images, docker: false }).rootfs('test/app:1');
    expect(changed.extracted).toBe(true);
    expect(changed.digest).not.toBe(first.digest);
    expect(changed.rootfs).not.toBe(first.rootfs);
    expect(readFileSync(join(changed.rootfs, 'app/version'), 'utf8')).toBe('two');
    expect(existsSync(join(changed.rootfs, 'app/mark'))).toBe(false);
    // Concurrent uses of one image share one extraction.
    const other = new ImageStore({ cacheDir: fresh('cache'), imageDir: images, docker: false });
    const both = await Promise.all([other.rootfs('test/app:1'), other.rootfs('test/app:1')]);
    expect(both.map((b) => b.extracted)).toEqual([true, false]);
    expect(both[1]!.rootfs).toBe(both[0]!.rootfs);
  });

  it('says which image is missing and where it looked', async () => {
    const images = fresh('images');
    const store = new ImageStore({ cacheDir: fresh('cache'), imageDir: images, docker: false });
    await expect(store.rootfs('swebench/swesmith.x86_64.none_1776_such.00000000')).rejects.toThrow(
      /image "swebench\/swesmith\.x86_64\.none_1776_such\.00000000" was not found in image tarballs in .*--image-dir/,
    );
    await expect(store.rootfs('Not A Reference')).rejects.toThrow(/is not an image reference/);
    writeFileSync(join(images, 'junk.tar'), 'not a tar');
    await expect(
      new ImageStore({ cacheDir: fresh('cache'), imageDir: images, docker: false }).rootfs('x/y'),
    ).rejects.toThrow(/junk\.tar/);
  });

  it('reads the config digest the engine would give (sha256 of the config blob)', async () => {
    const spec = { name: 'test/app:2', layers: [layer([['a', 'b']])] };
    const save = await readImageArchive(dockerSave(spec, join(fresh('d'), 'x.tar')));
    const oci = await readImageArchive(ociArchive(spec, join(fresh('o'), 'x.tar')));
    expect(save[0]!.digest).toBe(`sha256:${sha256(configOf(spec))}`);
    expect(oci[0]!.digest).toBe(save[0]!.digest);
  });
});

describe('bubblewrap over an image', () => {
  it('runs on the image: its env, the host /usr it asks for, the work dir seeded from the image', async () => {
    const links = ['bin', 'lib', 'lib64', 'sbin'].filter((l) => existsSync(`/${l}`));
    const images = fresh('images');
    const skeleton = layer([
      ['usr/'],
      ['etc/'],
      ['etc/image-marker', 'from the image'],
      ['testbed/'],
      ['testbed/README', 'the repository'],
      ['testbed/src/'],
      ['testbed/src/mod.py', 'x = 1\n'],
      ...links.map((l): Entry => [l, { link: `usr/${l}` }]),
    ]);
    dockerSave(
      {
        name: 'test/host-usr:1',
        layers: [skeleton],
        env: ['PATH=/usr/bin:/bin', 'IMAGE_VAR=from-config'],
        labels: { [HOST_USR_LABEL]: 'true' },
      },
      join(images, 'host-usr.tar'),
    );
    const rootDir = fresh('sandboxes');
    const store = new ImageStore({ cacheDir: fresh('cache'), imageDir: images, docker: false });
    const provider = bubblewrapProvider({ rootDir, imageStore: store });
    const sandbox = await provider.create({
      image: 'test/host-usr:1',
      workdir: '/testbed',
      env: { SPEC_VAR: 'spec' },
    });
    try {
      const r = await sandbox.exec(
        'cat /etc/image-marker; echo; cat README; echo; echo $IMAGE_VAR $SPEC_VAR; python3 -c "print(1+1)"; echo edit > src/mod.py && cat src/mod.py',
      );
      expect(r.exitCode, r.output).toBe(0);
      expect(r.stdout).toBe('from the image\nthe repository\nfrom-config spec\n2\nedit\n');
      expect(sandbox.capabilities.persistentProcesses).toBe(true);
    } finally {
      await sandbox.terminate();
    }
    // The cached rootfs is untouched by the sandbox's writes.
    const cached = await store.rootfs('test/host-usr:1');
    expect(readFileSync(join(cached.rootfs, 'testbed/src/mod.py'), 'utf8')).toBe('x = 1\n');
  });
});
