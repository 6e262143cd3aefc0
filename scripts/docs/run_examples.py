#!/usr/bin/env python3
"""Runs every example of the book (docs/src/*.md) and of the README against a
real latchkey and compares what it prints with what they show next to it.

The block convention (the book's "What CI checks" chapter says it too):

* A ```console block is a shell session: a line starting with `$ ` is a
  command (a line ending in `\\`, or inside a quoted string, continues it
  on the next line), and the
  lines after it, up to the next `$ ` line, are what it prints (stdout and
  stderr together). A command that exits non-zero must say so with a last
  output line `[exit N]`.
* A ```python or ```ts block is a program; the block right after it (only
  blank lines between) whose info string is `output` is what it prints.
  Python runs with the client of clients/python installed, TypeScript with
  the built client of clients/typescript (Node), both with LATCHKEY_URL set.
* ```sh, ```bash, ```console, ```python and ```ts blocks must run. A block
  that must not (it needs a cluster, certificates, Helm, a crontab...) says
  so in its info string: ```sh,norun. The runner counts and lists them.
* Every chapter gets its own latchkey in dev mode, with its own private
  redis-servers, started before its first example: state flows from one
  example to the next within a chapter, never between chapters. A chapter
  may set the server's settings with a comment line before its first
  example: `<!-- examples: LATCHKEY_API_KEYS=... LATCHKEY_MAX_WAIT_MS=... -->`.
  `localhost:8080` in a command is the chapter's server.
* Output is compared line by line, and as JSON where the book's line is
  JSON (an SSE `data:` line's JSON too): the same field names, the same
  array lengths, the same strings, booleans and numbers, except that
  - the numbers of fields that are times measured now (`VARYING` below:
    `expires_in_ms`, `ttl_ms`, `retry_after_ms`, ...) match any number,
  - a value written as a bare `...` matches any number (the book writes
    it where a number depends on timing, e.g. a lease cut to a session's
    remaining TTL),
  - a string written as "..." matches any string, and a 32-hex-digit string
    (a generated holder id, a session id) matches any other one,
  - in a line that is not JSON, `...` matches any text.
  A changed field name, a missing or extra field, a different status,
  error type or count fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_LANGS = {"console", "sh", "bash", "python", "ts", "typescript"}
# Fields whose numbers are times measured at the moment of the request: any
# number matches.
VARYING = {
    "expires_in_ms",
    "ttl_ms",
    "held_for_ms",
    "retry_after_ms",
    "validity_ms",
    "reset_after_ms",
    "elapsed_ms",
    "uptime_ms",
}
HEX32 = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    attrs: list[str]
    text: str
    output: str | None = None  # for python/ts: the `output` block after it


@dataclass
class Chapter:
    path: Path
    env: dict[str, str] = field(default_factory=dict)
    blocks: list[Block] = field(default_factory=list)


def parse_chapter(path: Path) -> Chapter:
    chapter = Chapter(path)
    lines = path.read_text().split("\n")
    i = 0
    raw: list[Block] = []
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^<!-- examples: (.*) -->$", line)
        if m:
            for item in m.group(1).split():
                key, _, value = item.partition("=")
                chapter.env[key] = value
        fence = re.match(r"^(```+)(.*)$", line)
        if fence:
            ticks, info = fence.group(1), fence.group(2).strip()
            parts = [p.strip() for p in info.split(",")] if info else [""]
            start = i
            body = []
            i += 1
            while i < len(lines) and not lines[i].startswith(ticks):
                body.append(lines[i])
                i += 1
            raw.append(Block(path, start + 1, parts[0], parts[1:], "\n".join(body) + "\n"))
            raw[-1].end = i  # type: ignore[attr-defined]
        i += 1
    # Attach `output` blocks to the program before them.
    for k, block in enumerate(raw):
        if block.lang == "output":
            prev = raw[k - 1] if k else None
            between = lines[prev.end + 1 : block.line - 1] if prev else ["x"]  # type: ignore[attr-defined]
            if prev is None or prev.lang not in ("python", "ts", "typescript") or any(
                b.strip() for b in between
            ):
                raise SystemExit(f"{path}:{block.line}: an output block that follows no program")
            prev.output = block.text
        elif block.lang in RUN_LANGS:
            chapter.blocks.append(block)
    return chapter


# ---------------------------------------------------------------- comparing


ANY_NUMBER = "\u0000any number"


def json_values(text: str, book: bool = False):
    """The JSON values of text, one after another, or None if it is not all JSON.
    In the book's text (book=True) a bare `...` value stands for any number."""
    dec = json.JSONDecoder()
    values = []
    pos = 0
    text = text.strip()
    if book:
        text = re.sub(r'(?<=:)\.\.\.(?=[,}\]])', lambda _: json.dumps(ANY_NUMBER), text)
    while pos < len(text):
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        try:
            value, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError:
            return None
        if not isinstance(value, (dict, list)):
            return None
        values.append(value)
    return values


def match_json(want, got, where: str, key: str | None = None) -> list[str]:
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{where}: expected an object, got {json.dumps(got)}"]
        errors = []
        missing = [k for k in want if k not in got]
        extra = [k for k in got if k not in want]
        if missing:
            errors.append(f"{where}: missing field(s) {missing}")
        if extra:
            errors.append(f"{where}: field(s) the book does not show {extra}")
        for k in want:
            if k in got:
                errors += match_json(want[k], got[k], f"{where}.{k}", k)
        return errors
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{where}: expected {len(want)} item(s), got {json.dumps(got)}"]
        errors = []
        for n, (w, g) in enumerate(zip(want, got)):
            errors += match_json(w, g, f"{where}[{n}]", key)
        return errors
    if want == ANY_NUMBER:
        if isinstance(got, (int, float)) and not isinstance(got, bool):
            return []
        return [f"{where}: expected a number, got {json.dumps(got)}"]
    if isinstance(want, str):
        if want == "..." and isinstance(got, str):
            return []
        if HEX32.match(want) and isinstance(got, str) and HEX32.match(got):
            return []
    if isinstance(want, bool) or want is None:
        return [] if want is got else [f"{where}: expected {json.dumps(want)}, got {json.dumps(got)}"]
    if isinstance(want, (int, float)) and not isinstance(got, bool) and isinstance(got, (int, float)):
        if key in VARYING or want == got:
            return []
    if want == got and type(want) is type(got):
        return []
    return [f"{where}: expected {json.dumps(want)}, got {json.dumps(got)}"]


def match_text_line(want: str, got: str) -> bool:
    if want == got:
        return True
    if "..." in want:
        pattern = ".*".join(re.escape(p) for p in want.split("..."))
        return re.fullmatch(pattern, got) is not None
    return False


def compare(want: str, got: str) -> list[str]:
    """Differences between the book's output and the printed one."""
    want = want.rstrip("\n")
    got = got.rstrip("\n")
    if want.strip() == "" and got.strip() == "":
        return []
    wv = json_values(want, book=True)
    if wv is not None:
        gv = json_values(got)
        if gv is None:
            return [f"expected JSON, got:\n{got}"]
        if len(gv) != len(wv):
            return [f"expected {len(wv)} JSON value(s), got {len(gv)}:\n{got}"]
        errors = []
        for n, (w, g) in enumerate(zip(wv, gv)):
            errors += match_json(w, g, f"value {n + 1}")
        return errors
    wl = want.split("\n")
    gl = got.split("\n")
    errors = []
    if len(wl) != len(gl):
        return [f"expected {len(wl)} line(s), got {len(gl)}:\n{got}"]
    for n, (w, g) in enumerate(zip(wl, gl)):
        if w.startswith("data: ") and g.startswith("data: "):
            wj, gj = json_values(w[6:], book=True), json_values(g[6:])
            if wj is not None and gj is not None:
                errors += match_json(wj[0], gj[0], f"line {n + 1} data")
                continue
        wj, gj = json_values(w, book=True), json_values(g)
        if wj is not None and gj is not None and len(wj) == len(gj) == 1:
            errors += match_json(wj[0], gj[0], f"line {n + 1}")
            continue
        if not match_text_line(w, g):
            errors.append(f"line {n + 1}: expected {w!r}, got {g!r}")
    return errors


# ---------------------------------------------------------------- running


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """latchkey in dev mode (its own private redis-servers) on a free port."""

    def __init__(self, binary: Path, env: dict[str, str], log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full = dict(os.environ)
        for k in list(full):
            if k.startswith("LATCHKEY_"):
                del full[k]
        full.update(env)
        full["LATCHKEY_LISTEN"] = f"127.0.0.1:{self.port}"
        self.log = log
        self.proc = subprocess.Popen(
            [str(binary)], env=full, stdout=log.open("w"), stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"latchkey exited before it was ready; its log ({log}):\n{log.read_text()}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise SystemExit(f"latchkey not ready after 30 s; log: {log}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Shell:
    """One bash per chapter: variables set by one example are there for the next."""

    MARK = "__latchkey_example_done__"

    def __init__(self, env: dict[str, str], cwd: Path):
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            text=True,
            bufsize=1,
        )

    def run(self, command: str, timeout: float) -> tuple[str, int]:
        assert self.proc.stdin and self.proc.stdout
        # A here-document keeps the command's own quoting intact.
        script = f"{{ eval \"$(cat <<'__LK_EOF__'\n{command}\n__LK_EOF__\n)\"; }} </dev/null 2>&1\nprintf '\\n{self.MARK} %s\\n' $?\n"
        self.proc.stdin.write(script)
        self.proc.stdin.flush()
        out = []
        deadline = time.monotonic() + timeout
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("the shell ended")
            if line.startswith(self.MARK):
                code = int(line.split()[1])
                break
            out.append(line)
            if time.monotonic() > deadline:
                raise RuntimeError("timed out")
        text = "".join(out)
        if text.endswith("\n"):
            text = text[:-1]  # the newline printf added
        return text, code

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def open_quote(command: str) -> bool:
    """Whether a quoted string of command goes on to the next line."""
    try:
        shlex.split(command)
    except ValueError:
        return True
    return False


def console_steps(block: Block) -> list[tuple[int, str, str]]:
    """(line, command, expected output) of each `$ ` command of a console block."""
    steps: list[tuple[int, str, str]] = []
    lines = block.text.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            raise SystemExit(f"{block.path}:{block.line + 1 + i}: output before any `$ ` command")
        start = i
        cmd = [line[2:]]
        while (cmd[-1].endswith("\\") or open_quote("\n".join(cmd))) and i + 1 < len(lines):
            i += 1
            cmd.append(lines[i])
        i += 1
        out = []
        while i < len(lines) and not lines[i].startswith("$ "):
            out.append(lines[i])
            i += 1
        steps.append((block.line + 1 + start, "\n".join(cmd), "\n".join(out)))
    return steps


def expected_exit(want: str) -> tuple[str, int]:
    lines = want.split("\n")
    m = re.fullmatch(r"\[exit (\d+)\]", lines[-1].strip()) if lines else None
    if m:
        return "\n".join(lines[:-1]), int(m.group(1))
    return want, 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(ROOT / "target/debug/latchkey"))
    ap.add_argument("--python", help="the python of a virtual environment with the latchkey client")
    ap.add_argument("--node-client", help="the built TypeScript client's directory (clients/typescript)")
    ap.add_argument("--work", default=str(ROOT / "target/docs-examples"))
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("chapters", nargs="*", help="chapter files (default: README.md and every docs/src/*.md)")
    args = ap.parse_args()

    src = ROOT / "docs/src"
    paths = [Path(p).resolve() for p in args.chapters] or [ROOT / "README.md", *sorted(src.glob("*.md"))]
    work = Path(args.work).absolute()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    binary = Path(args.binary).absolute()
    bindir = str(binary.parent)

    ran: dict[str, int] = {}
    skipped: list[str] = []
    failures: list[str] = []
    started = time.monotonic()
    for path in paths:
        chapter = parse_chapter(path)
        rel = path.relative_to(ROOT)
        runnable = [b for b in chapter.blocks if "norun" not in b.attrs]
        for b in chapter.blocks:
            if "norun" in b.attrs:
                first = next((l for l in b.text.split("\n") if l.strip()), "")
                skipped.append(f"{rel}:{b.line} ({b.lang}) {first[:70]}")
        if not runnable:
            continue
        cdir = work / path.stem
        cdir.mkdir()
        server = Server(binary, chapter.env, cdir / "server.log")
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("LATCHKEY_"):
                del env[k]
        env["LATCHKEY_URL"] = server.url
        for k, v in chapter.env.items():
            if k in ("LATCHKEY_API_KEY",):
                env[k] = v
        env["PATH"] = bindir + os.pathsep + env["PATH"]
        shell = Shell(env, cdir)
        count = 0
        try:
            for block in runnable:
                if block.lang == "console":
                    steps = console_steps(block)
                elif block.lang in ("sh", "bash"):
                    failures.append(
                        f"{rel}:{block.line}: a ```{block.lang} block: write it as ```console "
                        "(`$ ` commands and their output) or mark it ```sh,norun"
                    )
                    continue
                else:
                    steps = [(block.line, None, block.output or "")]
                for line, cmd, want in steps:
                    count += 1
                    want, code_want = expected_exit(want)
                    if cmd is None:
                        got, code = run_program(block, env, cdir, args, server.url)
                        label = f"{block.lang} program"
                    else:
                        command = cmd.replace("localhost:8080", f"127.0.0.1:{server.port}")
                        try:
                            got, code = shell.run(command, args.timeout)
                        except RuntimeError as e:
                            failures.append(f"{rel}:{line}: {cmd}\n  {e}")
                            shell.close()
                            shell = Shell(env, cdir)
                            continue
                        label = cmd.split("\n")[0]
                    errors = compare(want, got)
                    if code != code_want:
                        errors.insert(0, f"exit status {code}, the book says {code_want}")
                    if errors:
                        failures.append(
                            f"{rel}:{line}: {label}\n"
                            + "\n".join("  " + e.replace("\n", "\n    ") for e in errors)
                            + "\n  printed:\n    " + got.replace("\n", "\n    ")
                        )
        finally:
            shell.close()
            server.stop()
        ran[str(rel)] = count

    total = sum(ran.values())
    print(f"book examples: {total} run in {len(ran)} chapter(s), {len(skipped)} block(s) skipped, "
          f"{len(failures)} failed, {time.monotonic() - started:.1f} s")
    for rel, n in ran.items():
        print(f"  {rel}: {n}")
    if skipped:
        print("skipped (marked norun):")
        for s in skipped:
            print("  " + s)
    if failures:
        print("FAILED:")
        for f in failures:
            print(f)
        return 1
    return 0


def run_program(block: Block, env: dict[str, str], cdir: Path, args, url: str) -> tuple[str, int]:
    if block.lang == "python":
        if not args.python:
            raise SystemExit("a Python example and no --python")
        prog = cdir / f"example_{block.line}.py"
        prog.write_text(block.text)
        cmd = [str(Path(args.python).absolute()), str(prog)]
    else:
        if not args.node_client:
            raise SystemExit("a TypeScript example and no --node-client")
        # Node 20 runs JavaScript: the example is compiled with the client's
        # own TypeScript compiler, importing "latchkey" from the built client.
        client = Path(args.node_client).resolve()
        tdir = Path(tempfile.mkdtemp(prefix=f"example_{block.line}_", dir=cdir))
        (tdir / "example.ts").write_text(block.text)
        nm = tdir / "node_modules"
        nm.mkdir()
        (nm / "latchkey").symlink_to(client)
        (tdir / "package.json").write_text('{"type": "module"}\n')
        (tdir / "tsconfig.json").write_text(json.dumps({
            "compilerOptions": {
                "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext",
                "strict": True, "skipLibCheck": True, "outDir": "out", "lib": ["ES2022", "DOM", "ESNext.Disposable"],
                "types": [],
            },
            "files": ["example.ts"],
        }))
        tsc = client / "node_modules/.bin/tsc"
        r = subprocess.run([str(tsc), "-p", str(tdir)], capture_output=True, text=True, cwd=tdir)
        if r.returncode != 0:
            return "tsc failed:\n" + r.stdout + r.stderr, r.returncode
        cmd = ["node", str(tdir / "out/example.js")]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cdir, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return "timed out", -1
    return (r.stdout + r.stderr).rstrip("\n"), r.returncode


if __name__ == "__main__":
    sys.exit(main())
