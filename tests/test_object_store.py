"""Shards read straight from an S3-compatible object store: a moto server on a loopback port (started and stopped
here) holds the same generated files as a local corpus; every report of the URL scan must equal the local scan's,
with each local path written as its URL. Errors (refused connection, missing bucket, missing object, refused
credentials) are one line naming the URL, exit 2, and never show the secret."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tokscan
from tokscan import _core
from tokscan.errors import InputError

import synth

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

BUCKET = "corpora"
SECRET = "s3cr3t-Never-Print-7f9c2e"
KEY_ID = "AKIDTOKSCANTEST"
LAYOUTS = ("parquet_full", "numpy_mask", "jsonl")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    srv = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    srv.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def s3_env(server):
    env = {
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": server,
        "AWS_ALLOW_HTTP": "true",
        "TOKSCAN_OBJECT_RETRIES": "1",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def corpus(s3_env, tmp_path_factory):
    """Local corpus directory -> the URL of its copy in the bucket (plus a stray file the scan must skip)."""
    samples = synth.build_corpus(n_clean=120, seed=11, anomalies_per_code=1)
    root = tmp_path_factory.mktemp("objects")
    client = boto3.client(
        "s3",
        endpoint_url=s3_env["AWS_ENDPOINT_URL"],
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    out = {}
    for name in LAYOUTS:
        writer, _mask = synth.LAYOUTS[name]
        local = writer(samples, root / name)
        (local / "NOTES.txt").write_text("not a shard\n")
        for f in sorted(p for p in local.rglob("*") if p.is_file()):
            client.upload_file(str(f), BUCKET, f"data/{name}/{f.relative_to(local).as_posix()}")
        out[name] = (local, f"s3://{BUCKET}/data/{name}/")
    return out


def _as_url(data, local: Path, url: str):
    """The local report with its paths written as the URL's (what the URL scan must produce)."""
    base = json.dumps(str(local.resolve()))[1:-1]
    text = json.dumps(data).replace(base + "/", url)
    return json.loads(text.replace(base + '"', url + '"'))


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokscan", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_prefix_scan_equals_local_scan(corpus, layout):
    local, url = corpus[layout]
    remote = tokscan.scan(url, "kimi-k2")
    here = tokscan.scan(str(local), "kimi-k2")
    assert remote.n_samples == here.n_samples > 0
    assert remote.findings == _as_url(here.findings, local, url)
    # The stray object is skipped by the same rule as the stray file (a NumPy directory ignores other files), and
    # named by its URL.
    if layout != "numpy_mask":
        assert f"{url}NOTES.txt" in json.dumps(remote.data)
    assert SECRET not in json.dumps(remote.data)


def test_an_object_larger_than_a_part_is_fetched_in_parts(s3_env, corpus, tmp_path):
    """A token file over the 8 MiB part size arrives as concurrent ranged reads written at their offsets (the last
    part short): the scan of the URL equals the local scan's."""
    samples = synth.build_corpus(n_clean=120, seed=11, anomalies_per_code=1)
    while sum(len(s.ids) for s in samples) < 1_300_000:  # int64 ids: > 10 MB, not a multiple of the part
        samples = samples + samples
    local = synth.write_numpy(samples, tmp_path / "big", with_mask=True, dtype="int64")
    assert (local / "tokens.npy").stat().st_size > 10 << 20
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    url = f"s3://{BUCKET}/big/"
    for f in sorted(p for p in local.iterdir() if p.is_file()):
        client.upload_file(str(f), BUCKET, f"big/{f.name}")
    remote = tokscan.scan(url, "kimi-k2")
    here = tokscan.scan(str(local), "kimi-k2")
    assert remote.n_tokens == here.n_tokens > 1_300_000
    assert remote.findings == _as_url(here.findings, local, url)


def test_many_objects_fetch_within_a_small_file_limit(s3_env, corpus, tmp_path):
    """A prefix of 100 shards is fetched with at most a few files open at once: the CLI under a 48-descriptor
    limit reads it by URL and reports what the local scan reports."""
    import resource

    samples = synth.build_corpus(n_clean=200, seed=5, anomalies_per_code=1)
    local = synth.write_jsonl(samples, tmp_path / "many", n_shards=100)
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    files = sorted(p for p in local.iterdir() if p.is_file())
    assert len(files) == 100
    for f in files:
        client.upload_file(str(f), BUCKET, f"many/{f.name}")
    url = f"s3://{BUCKET}/many/"

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))

    out = tmp_path / "remote.json"
    r = subprocess.run(
        [sys.executable, "-m", "tokscan", "scan", url, "-q", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=low_limit,
    )
    assert r.returncode in (0, 1), r.stderr
    here = tokscan.scan(str(local), "kimi-k2")
    remote = json.loads(out.read_text())
    remote.pop("run")
    assert remote == _as_url(here.findings, local, url)


def test_folder_markers_are_not_files(s3_env, corpus, tmp_path):
    """Empty "folder" objects a console creates (`prefix/`, `prefix/sub/`) are neither files nor errors."""
    local, _url = corpus["jsonl"]
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    for key in ("markers/", "markers/sub/"):
        client.put_object(Bucket=BUCKET, Key=key, Body=b"")
    for f in sorted(p for p in local.rglob("*") if p.is_file()):
        client.upload_file(str(f), BUCKET, f"markers/sub/{f.relative_to(local).as_posix()}")
    r = tokscan.scan(f"s3://{BUCKET}/markers/", "kimi-k2")
    assert r.n_samples == tokscan.scan(str(local), "kimi-k2").n_samples


def test_single_object_and_prefix_without_slash(corpus):
    local, url = corpus["jsonl"]
    one = sorted(local.glob("*.jsonl"))[0]
    remote = tokscan.scan(url + one.name, "kimi-k2")
    assert remote.findings == _as_url(tokscan.scan(str(one), "kimi-k2").findings, local, url)
    assert tokscan.scan(url.rstrip("/"), "kimi-k2").findings == tokscan.scan(url, "kimi-k2").findings


def test_cli_json_and_terminal_match_local(corpus, tmp_path):
    local, url = corpus["parquet_full"]
    r = cli("scan", url, "--json", str(tmp_path / "r.json"), "--no-progress")
    l_ = cli("scan", str(local), "--json", str(tmp_path / "l.json"), "--no-progress")
    assert r.returncode == l_.returncode, r.stderr
    remote = json.loads((tmp_path / "r.json").read_text())
    here = _as_url(json.loads((tmp_path / "l.json").read_text()), local, url)
    for d in (remote, here):
        d.pop("run", None)
    assert remote == here
    for text in (r.stdout, r.stderr, (tmp_path / "r.json").read_text()):
        assert SECRET not in text


def test_show_reads_a_sample_by_url(corpus, tmp_path):
    local, url = corpus["numpy_mask"]
    r = cli("show", url, "--row", "3", "--json", str(tmp_path / "r.json"), "-q")
    l_ = cli("show", str(local), "--row", "3", "--json", str(tmp_path / "l.json"), "-q")
    assert r.returncode == l_.returncode == 0, r.stderr
    remote = json.loads((tmp_path / "r.json").read_text())
    assert remote == _as_url(json.loads((tmp_path / "l.json").read_text()), local, url)


def test_show_a_row_fetches_the_footer_and_its_row_group(s3_env, corpus, tmp_path):
    """`show --row` on a large Parquet object fetches its footer and the one row group holding the row (ranged
    reads into a sparse local file), and shows what the local file shows; other objects come whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    samples = synth.build_corpus(n_clean=300, seed=4, anomalies_per_code=1)
    rng = np.random.default_rng(0)
    # Long random-id samples between the real ones: ~3 MB of incompressible ids in 12 row groups.
    rows = [s.ids if i % 3 else list(rng.integers(1000, 150000, 900)) for i, s in enumerate(samples * 4)]
    local = tmp_path / "big"
    local.mkdir()
    pq.write_table(
        pa.table({"input_ids": pa.array(rows, type=pa.list_(pa.int32()))}), local / "big.parquet", row_group_size=100
    )
    size = (local / "big.parquet").stat().st_size
    assert size > 2 << 20
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    client.upload_file(str(local / "big.parquet"), BUCKET, "row-groups/big.parquet")
    url = f"s3://{BUCKET}/row-groups/"
    for row in (0, 555, len(rows) - 1):
        r = cli("show", url, "--row", str(row), "--json", str(tmp_path / "r.json"), "-q")
        l_ = cli("show", str(local), "--row", str(row), "--json", str(tmp_path / "l.json"), "-q")
        assert r.returncode == l_.returncode == 0, r.stderr
        remote = json.loads((tmp_path / "r.json").read_text())
        assert remote == _as_url(json.loads((tmp_path / "l.json").read_text()), local, url)
    # What was fetched: the footer, then one row group.
    dest = tmp_path / "staged"
    staged, _base, _url, objects, footer, sparse = _core.fetch_objects(url, str(dest), True)
    assert objects == 1 and [s[1] for s in sparse] == [url + "big.parquet"]
    group = _core.fill_row([staged], 555, sparse)
    assert 0 < footer < size // 20 and 0 < group < size // 8, (footer, group, size)
    assert _core.fill_row([staged], 555, []) == 0  # a file fetched whole needs nothing more
    assert "out of range" in _one_line_exit_2(cli("show", url, "--row", str(len(rows))), str(len(rows)))
    # Overwritten since its footer was read: an error naming the object, not a mix of two versions.
    pq.write_table(pq.read_table(local / "big.parquet").slice(0, 1100), tmp_path / "v2.parquet", row_group_size=100)
    client.upload_file(str(tmp_path / "v2.parquet"), BUCKET, "row-groups/big.parquet")
    with pytest.raises(InputError, match=r"big\.parquet: the object was overwritten"):
        _core.fill_row([staged], 1100, sparse)


def test_show_a_row_of_a_numpy_directory_with_a_large_meta_parquet(s3_env, corpus, tmp_path):
    """A NumPy directory's `meta.parquet` is read whole by its reader: however large, it is fetched whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    one = next(s for s in synth.build_corpus(n_clean=20, seed=2) if not s.expected)
    n = 12_000
    local = tmp_path / "np"
    local.mkdir()
    np.save(local / "tokens.npy", np.tile(np.array(one.ids, dtype=np.int32), n))
    np.save(local / "offsets.npy", np.arange(n + 1, dtype=np.int64) * len(one.ids))
    ids = [os.urandom(64).hex() for _ in range(n)]  # incompressible: a meta.parquet over 1 MiB
    pq.write_table(pa.table({"sample_id": ids, "category": ["c"] * n}), local / "meta.parquet")
    assert (local / "meta.parquet").stat().st_size > 1 << 20
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    for f in local.iterdir():
        client.upload_file(str(f), BUCKET, f"np-meta/{f.name}")
    url = f"s3://{BUCKET}/np-meta/"
    r = cli("show", url, "--row", "7", "--json", str(tmp_path / "r.json"), "-q")
    l_ = cli("show", str(local), "--row", "7", "--json", str(tmp_path / "l.json"), "-q")
    assert r.returncode == l_.returncode == 0, r.stderr
    assert json.loads((tmp_path / "r.json").read_text()) == _as_url(
        json.loads((tmp_path / "l.json").read_text()), local, url
    )
    assert json.loads((tmp_path / "r.json").read_text())["sample_id"] == ids[7]


def test_clean_from_bucket_to_local_directory(corpus, tmp_path):
    local, url = corpus["parquet_full"]
    report = tmp_path / "r.json"
    cli("scan", url, "--json", str(report), "-q")
    r = cli("clean", url, "--report", str(report), "--out", str(tmp_path / "clean"))
    assert r.returncode == 0, r.stderr
    here_report = tmp_path / "l.json"
    cli("scan", str(local), "--json", str(here_report), "-q")
    l_ = cli("clean", str(local), "--report", str(here_report), "--out", str(tmp_path / "clean_local"))
    assert l_.returncode == 0, l_.stderr
    names = sorted(p.relative_to(tmp_path / "clean").as_posix() for p in (tmp_path / "clean").rglob("*"))
    assert names == sorted(
        p.relative_to(tmp_path / "clean_local").as_posix() for p in (tmp_path / "clean_local").rglob("*")
    )
    cleaned = tokscan.scan(str(tmp_path / "clean"), "kimi-k2")
    assert cleaned.data["anomalies"] == tokscan.scan(str(tmp_path / "clean_local"), "kimi-k2").data["anomalies"]
    manifest = json.loads((tmp_path / "clean" / "tokscan-clean.json").read_text())
    assert all(f["source"].startswith(url) for f in manifest["inputs"]), manifest["inputs"]


def _fetch_all(url: str, dest: Path) -> dict[str, bytes]:
    """Every object under `url`, by its name relative to it (read back through the core's own fetch)."""
    local = Path(_core.fetch_objects(url, str(dest))[0])  # under the folders of the prefix's key
    return {p.relative_to(local).as_posix(): p.read_bytes() for p in sorted(local.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("layout", ["parquet_full", "numpy_mask", "jsonl"])
def test_clean_to_a_bucket_writes_the_local_copy(corpus, tmp_path, layout):
    """`clean --out s3://…/`: the objects are the local clean's files byte for byte, the manifest names them by
    URL, and the copy scans as the local copy does; from a bucket and from a local directory."""
    local, url = corpus[layout]
    report = tmp_path / "r.json"
    assert cli("scan", str(local), "--json", str(report), "-q").returncode == 1
    assert cli("clean", str(local), "--report", str(report), "--out", str(tmp_path / "here")).returncode == 0
    want = {p.relative_to(tmp_path / "here").as_posix(): p.read_bytes() for p in (tmp_path / "here").rglob("*")}
    for i, source in enumerate([str(local), url]):
        dest = f"s3://{BUCKET}/cleaned/{layout}/{i}/"
        scanned = tmp_path / f"r{i}.json"  # a report of the same paths
        assert cli("scan", source, "--json", str(scanned), "-q").returncode == 1
        r = cli("clean", source, "--report", str(scanned), "--out", dest)
        assert r.returncode == 0, r.stderr
        assert f"-> {dest}" in r.stdout and f"{dest}tokscan-clean.json" in r.stdout
        got = _fetch_all(dest, tmp_path / f"back{i}")
        manifest = json.loads(got.pop("tokscan-clean.json"))
        assert got == {k: v for k, v in want.items() if k != "tokscan-clean.json"}
        assert all(f["output"] is None or f["output"].startswith(dest) for f in manifest["inputs"]), manifest
        assert manifest["kept"] == json.loads(want["tokscan-clean.json"])["kept"]
        assert tokscan.scan(dest, "kimi-k2").data["anomalies"] == tokscan.scan(str(tmp_path / "here")).data["anomalies"]


def test_a_file_larger_than_a_part_is_uploaded_in_parts(s3_env, corpus, tmp_path):
    """Past 8 MiB a file goes up as a multipart upload of 8 MiB parts; what comes back is the same bytes."""
    src = tmp_path / "up"
    (src / "sub").mkdir(parents=True)
    big = np.random.default_rng(3).integers(0, 256, size=(8 << 20) * 2 + 12345, dtype=np.uint8).tobytes()
    (src / "sub" / "big.bin").write_bytes(big)
    (src / "small.txt").write_text("small\n")
    dest = f"s3://{BUCKET}/uploads/parts/"
    assert _core.upload_objects(str(src), dest) == (2, len(big) + 6)
    assert _fetch_all(dest, tmp_path / "back") == {"sub/big.bin": big, "small.txt": b"small\n"}


def test_uploaded_objects_keep_their_names(s3_env, corpus, tmp_path):
    """Keys are the files' relative names as they are (a `category=数学` folder is not percent-encoded), and the
    file named last goes up after the others."""
    src = tmp_path / "names"
    for rel in ("category=数学/part 0#1.txt", "ts=2024%3A01/x.txt", "tokscan-clean.json"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(rel)
    dest = f"s3://{BUCKET}/uploads/names/"
    assert _core.upload_objects(str(src), dest, "tokscan-clean.json")[0] == 3
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix="uploads/names/")["Contents"])
    assert keys == sorted(
        f"uploads/names/{r}" for r in ("category=数学/part 0#1.txt", "ts=2024%3A01/x.txt", "tokscan-clean.json")
    )


def test_clean_refuses_a_prefix_in_use(corpus, tmp_path):
    """An output prefix that holds an object, overlaps the input, or names no bucket: one line, exit 2, and
    nothing written."""
    local, url = corpus["parquet_full"]
    report = tmp_path / "r.json"
    cli("scan", url, "--json", str(report), "-q")
    before = _fetch_all(url, tmp_path / "before")
    for dest, says in ((url, "overlaps"), (url + "sub/", "overlaps"), (f"s3://{BUCKET}/data/", "overlaps")):
        assert says in _one_line_exit_2(cli("clean", url, "--report", str(report), "--out", dest), dest)
    taken = f"s3://{BUCKET}/data/jsonl/"
    assert "not empty" in _one_line_exit_2(cli("clean", str(local), "--report", str(report), "--out", taken), taken)
    gone = "s3://no-such-bucket/out/"
    assert "no such" in _one_line_exit_2(cli("clean", str(local), "--report", str(report), "--out", gone), gone)
    assert _fetch_all(url, tmp_path / "after") == before


def _one_line_exit_2(r: subprocess.CompletedProcess[str], url: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert url in lines[0] and "Traceback" not in r.stderr
    assert SECRET not in r.stderr + r.stdout
    return lines[0]


def test_missing_object_and_bucket(corpus):
    url = f"s3://{BUCKET}/data/nothing-here/"
    assert "no such" in _one_line_exit_2(cli("scan", url), url)
    url = "s3://no-such-bucket/data/"
    assert "no such" in _one_line_exit_2(cli("scan", url), url)
    with pytest.raises(InputError, match="no such"):
        tokscan.scan(f"s3://{BUCKET}/data/missing.parquet", "kimi-k2")


def test_network_error_is_bounded(s3_env):
    url = f"s3://{BUCKET}/data/"
    t0 = time.perf_counter()
    r = cli("scan", url, env={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{_free_port()}"})
    _one_line_exit_2(r, url)
    assert time.perf_counter() - t0 < 20


def test_denied_credentials(tmp_path):
    """A second server that checks credentials (moto's IAM auth on from the first request): the test's made-up
    key is refused."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        url = f"s3://{BUCKET}/data/"
        line = _one_line_exit_2(cli("scan", url, env={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}), url)
        assert "denied" in line or "refused" in line
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_decode_refuses_urls(corpus):
    _local, url = corpus["jsonl"]
    r = cli("scan", url, "--decode", "2")
    assert r.returncode == 2 and "object-store" in r.stderr


@pytest.fixture(scope="module")
def large(s3_env, corpus, tmp_path_factory):
    """Objects past the size staged whole (`SPARSE_MIN`, 1 MiB): Parquet shards of 3 MB in row groups of 100,
    a NumPy directory of 8 MB of tokens, JSONL shards; layout -> (local directory, URL)."""
    samples = synth.build_corpus(n_clean=300, seed=4, anomalies_per_code=1) * 20
    root = tmp_path_factory.mktemp("large")
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    out = {}
    for name in LAYOUTS:
        writer, _mask = synth.LAYOUTS[name]
        local = writer(samples, root / name)
        for f in sorted(p for p in local.rglob("*") if p.is_file()):
            client.upload_file(str(f), BUCKET, f"large/{name}/{f.relative_to(local).as_posix()}")
        out[name] = (local, f"s3://{BUCKET}/large/{name}/")
    return out


def _allocated(root: Path) -> int:
    """Bytes of disk the files under `root` take (a sparse file's missing parts take none)."""
    return sum(f.stat().st_blocks * 512 for f in root.rglob("*") if f.is_file())


def _tasks_agree(url: str, local: Path, staging: Path, n_tasks: int = 3) -> list[bytes]:
    """Plans `url` from a staging of its footers and headers and `local` as it is; each task of the URL's plan,
    scanned from the objects it fetches itself, gives what the same task over the local files gives."""
    prof = tokscan.load_profile("kimi-k2")
    tasks, _inputs, rows, _units, _tokens, bases, _sources = _core.plan_scan([url], None, n_tasks, str(staging))
    here, _i, rows_here, _u, _t, none, _s = _core.plan_scan([str(local)], None, n_tasks)
    assert len(tasks) == len(here) >= 1 and rows == rows_here > 0 and none == []
    assert [u for _local, u in bases] == [url[: url.rindex("/") + 1]]
    for remote, mine in zip(tasks, here, strict=True):
        assert _core.TaskScan(remote, prof).run() == _core.TaskScan(mine, prof).run()
    return tasks


def test_a_task_of_a_plan_fetches_its_own_parts(large, tmp_path):
    """The plan made from footers and headers names each source's objects; a task scanned elsewhere fetches
    the parts its units read and gives what the task over the local files gives. What the planner staged
    takes a tenth of the corpus at most."""
    for layout in LAYOUTS:
        local, url = large[layout]
        staging = tmp_path / layout
        tasks = _tasks_agree(url, local, staging)
        size = sum(f.stat().st_size for f in local.rglob("*") if f.is_file())
        # JSONL is numbered by reading it: the planner fetches it whole.
        assert (_allocated(staging) < size // 10) if layout != "jsonl" else _allocated(staging) >= size
        assert len(tasks) >= (3 if layout == "parquet_full" else 1)


def test_tasks_read_keys_a_url_cannot_spell_and_megatron_pairs(s3_env, large, tmp_path):
    """Keys with `%`, `#` and `?` (a URL re-parsed would decode or cut them) and a Megatron `.bin` with its
    `.idx` (a companion the task must fetch too) scan in tasks as on disk."""
    import shutil

    local, _url = large["parquet_full"]
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    odd = tmp_path / "odd"
    for folder in ("a%41b", "x#y", "q?z", "数学 co=de"):
        (odd / folder).mkdir(parents=True)
        for f in sorted(local.glob("*.parquet"))[:2]:
            shutil.copy(f, odd / folder / f.name)
            client.upload_file(str(f), BUCKET, f"odd/{folder}/{f.name}")
    _tasks_agree(f"s3://{BUCKET}/odd/", odd, tmp_path / "odd-staged", n_tasks=5)
    samples = synth.build_corpus(n_clean=60, seed=8, anomalies_per_code=1) * 12
    meg = tmp_path / "meg"
    meg.mkdir()
    ids = [np.asarray(s.ids, dtype=np.int32) for s in samples]
    np.concatenate(ids).tofile(meg / "corpus.bin")
    lengths = np.array([len(x) for x in ids])
    synth.write_megatron_index(meg / "corpus.idx", np.int32, lengths, np.arange(len(ids) + 1))
    for f in meg.iterdir():
        client.upload_file(str(f), BUCKET, f"meg/{f.name}")
    size = (meg / "corpus.bin").stat().st_size
    assert size > 1 << 20  # staged sparse: the task fetches its rows' elements
    _tasks_agree(f"s3://{BUCKET}/meg/", meg, tmp_path / "meg-staged", n_tasks=2)
    assert _allocated(tmp_path / "meg-staged") < size // 4


def test_a_task_reads_the_planned_version_or_fails(s3_env, large, tmp_path, monkeypatch):
    """An object overwritten after the plan, even with the same row groups, is an error naming its URL, never
    a scan of other bytes than planned."""
    import pyarrow.parquet as pq

    local, _url = large["parquet_full"]
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    first = sorted(local.glob("*.parquet"))[0]
    for f in sorted(local.glob("*.parquet")):
        client.upload_file(str(f), BUCKET, f"versions/{f.name}")
    url = f"s3://{BUCKET}/versions/"
    tasks, *_ = _core.plan_scan([url], None, 3, str(tmp_path / "staged"))
    # The rows of each row group reversed: the same row groups, other samples in them.
    pf = pq.ParquetFile(first)
    with pq.ParquetWriter(tmp_path / "reversed.parquet", pf.schema_arrow) as w:
        for i in range(pf.num_row_groups):
            group = pf.read_row_group(i)
            w.write_table(group.take(list(range(len(group) - 1, -1, -1))))
    assert (
        pq.ParquetFile(tmp_path / "reversed.parquet").metadata.num_row_groups
        == pq.ParquetFile(first).metadata.num_row_groups
    )
    client.upload_file(str(tmp_path / "reversed.parquet"), BUCKET, f"versions/{first.name}")
    prof = tokscan.load_profile("kimi-k2")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # where the task stages its objects
    with pytest.raises(InputError, match=rf"^{url}{first.name}: the object was overwritten"):
        _core.TaskScan(tasks[0], prof).run()
    assert not list((tmp_path / "tmp").iterdir())  # the task's staging is removed


def test_ray_scan_of_urls_equals_local_scan(s3_env, large, tmp_path, monkeypatch):
    """`engine="ray"` on URLs: every task fetches its own objects' parts (the tests above: what the planner
    stages, and each task's result); the report equals the local scan's of the same files."""
    ray = pytest.importorskip("ray")
    if not hasattr(ray, "init"):
        pytest.skip("ray is not installed")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        for layout in LAYOUTS:
            local, url = large[layout]
            remote = tokscan.scan(url, "kimi-k2", engine="ray", flagged_detail=50)
            here = tokscan.scan(str(local), "kimi-k2", flagged_detail=50)
            assert remote.n_samples == here.n_samples > 6000
            assert remote.findings == _as_url(here.findings, local, url)
        # Near duplicates: the task confirming the pairs reads the planned corpus, even when an object that sorts
        # first lands under the prefix after the plan (a corpus discovered again would shift every row).
        near = synth.LAYOUTS["parquet_full"][0](synth.with_near_copies(9), tmp_path / "near")
        client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
        shards = sorted(near.glob("*.parquet"))
        for f in shards:
            client.upload_file(str(f), BUCKET, f"near/{f.name}")
        plan = _core.plan_scan

        def then_an_object_lands(*args):
            got = plan(*args)
            client.upload_file(str(shards[-1]), BUCKET, "near/aaa-late.parquet")
            return got

        monkeypatch.setattr(_core, "plan_scan", then_an_object_lands)
        url = f"s3://{BUCKET}/near/"
        remote = tokscan.scan(url, "kimi-k2", engine="ray", near_dup=True)
        here = tokscan.scan(str(near), "kimi-k2", near_dup=True)
        assert here.data["near_duplicates"]["confirmed"] > 0
        assert remote.data["near_duplicates"] == _as_url(here.data["near_duplicates"], near, url)
        assert remote.findings == _as_url(here.findings, near, url)
    finally:
        ray.shutdown()


def test_a_corrupt_object_is_named_by_its_url(s3_env, corpus, tmp_path):
    """A reader's error on a staged copy names the object's URL, in the local scan and on Ray's planner."""
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    client.put_object(Bucket=BUCKET, Key="corrupt/part-0.parquet", Body=b"PAR1" + os.urandom(2000) + b"PAR1")
    url = f"s3://{BUCKET}/corrupt/"
    with pytest.raises(InputError, match=rf"^{url}part-0\.parquet: "):
        tokscan.scan(url, "kimi-k2")
    with pytest.raises(InputError, match=rf"^{url}part-0\.parquet: "):
        _core.plan_scan([url], None, 2, str(tmp_path))
    line = _one_line_exit_2(cli("scan", url), url)
    assert "tokscan-objects-" not in line


def test_a_url_naming_a_category_folder_keeps_the_category(s3_env, corpus, tmp_path):
    """`s3://…/category=code/` gives its rows the category `code`, as the same folder on disk does (the objects
    are staged under their keys' folders); a single object in such a folder as the file on disk."""
    import pyarrow.parquet as pq

    local, _url = corpus["parquet_full"]
    folder = tmp_path / "hive" / "category=code"
    folder.mkdir(parents=True)
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    for f in sorted(local.glob("*.parquet")):
        # Without a category column (a row's own category wins over its folder's).
        pq.write_table(pq.read_table(f, columns=["input_ids", "loss_mask"]), folder / f.name)
        client.upload_file(str(folder / f.name), BUCKET, f"hive/category=code/{f.name}")
    url = f"s3://{BUCKET}/hive/category=code/"
    here = tokscan.scan(str(folder), "kimi-k2")
    assert list(here.data["categories"]) == ["code"]
    remote = tokscan.scan(url, "kimi-k2")
    assert remote.findings == _as_url(here.findings, folder, url)
    first = sorted(folder.glob("*.parquet"))[0]
    one, here = tokscan.scan(url + first.name, "kimi-k2"), tokscan.scan(str(first), "kimi-k2")
    assert list(one.data["categories"]) == list(here.data["categories"])
    assert one.findings == _as_url(here.findings, folder, url)


@pytest.mark.parametrize("layout", ["jsonl", "parquet_full"])
def test_a_url_scan_with_the_wrong_profile_gets_the_hint(corpus, tmp_path, layout):
    """Issue 47: the objects are fetched once for the command, so the hint before the scan reads the corpus the
    scan then reads (not the URL as a path), and the report still names every object by its URL."""
    local, url = corpus[layout]
    r = cli("scan", url, "-p", "deepseek", "--json", str(tmp_path / "r.json"), "--no-progress")
    l_ = cli("scan", str(local), "-p", "deepseek", "--json", str(tmp_path / "l.json"), "--no-progress")
    assert r.returncode == l_.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "error" not in r.stderr
    hint = [line for line in r.stderr.splitlines() if line.startswith("hint:")]
    assert len(hint) == 1 and hint == [line for line in l_.stderr.splitlines() if line.startswith("hint:")]
    assert "of the first 64 samples have no user turn for profile deepseek" in hint[0]
    assert "try --profile kimi-k2" in hint[0]
    remote = json.loads((tmp_path / "r.json").read_text())
    here = _as_url(json.loads((tmp_path / "l.json").read_text()), local, url)
    for d in (remote, here):
        d.pop("run", None)
    assert remote == here
    assert "tokscan-objects-" not in (tmp_path / "r.json").read_text() + r.stdout + r.stderr


def test_the_hint_after_a_url_scan(s3_env, corpus, tmp_path):
    """Issue 47: a corpus whose first samples fit the profile and most others do not gets the hint after the scan,
    read from the objects fetched for the command (it opened the URL as a local path before: exit 2)."""
    samples = synth.build_corpus(n_clean=120, seed=11)[:70]
    root = tmp_path / "mixed"
    kimi = synth.write_jsonl(samples, root / "kimi", n_shards=1)
    from tokscan import demo

    ds, _profile = demo.write_demo(tmp_path / "demo", "deepseek", seed=4)
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    client.upload_file(str(next(kimi.glob("*.jsonl"))), BUCKET, "mixed/a-kimi.jsonl")
    client.upload_file(str(ds / "deepseek-demo.parquet"), BUCKET, "mixed/b-deepseek.parquet")
    url = f"s3://{BUCKET}/mixed/"
    r = cli("scan", url, "--no-progress")  # the default kimi-k2
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "error" not in r.stderr
    hint = [line for line in r.stderr.splitlines() if line.startswith("hint:")]
    assert len(hint) == 1, r.stderr
    assert "% of samples have no user turn for profile kimi-k2" in hint[0] and "first 64" not in hint[0]
    # The same hint as the API's after a scan of the URL that kept nothing (the paths are fetched for it).
    from tokscan.samples.hints import profile_hint

    report = tokscan.scan(url, "kimi-k2")
    assert report.corpus is None
    late = profile_hint(report, [url])
    assert late is not None and hint[0] == f"hint: {late.message}"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_hint_reads_the_probed_rows_of_objects(large, layout):
    """`profile_hint` given URLs (a Ray scan's, which kept no corpus) fetches large objects' footers or heads and
    then the parts that hold the probed rows: it says what it says of the local files."""
    from tokscan.samples.hints import profile_hint

    local, url = large[layout]
    here, remote = tokscan.scan(str(local), "deepseek"), tokscan.scan(url, "deepseek")
    assert remote.corpus is None
    expected = profile_hint(here, [str(local)])
    assert expected is not None and expected.better == "kimi-k2"
    assert profile_hint(remote, [url]) == expected


# --- Settings the client cannot use, and a server whose listing never ends (issue 46, item 8) -------------------

_BAD_SETTINGS = [
    ("AWS_ENDPOINT_URL", ""),
    ("AWS_ENDPOINT_URL", "not a url"),
    ("AWS_ENDPOINT_URL", "http://[::1"),
    ("AWS_ENDPOINT_URL", "http://127.0.0.1:99999"),
    ("AWS_ENDPOINT_URL", "ftp://127.0.0.1:9000"),
    ("AWS_REGION", "us-east-1\nx"),
    ("AWS_REGION", "us east 1"),
    ("AWS_SESSION_TOKEN", f"{SECRET}\nX-Injected: 1"),
    ("AWS_ACCESS_KEY_ID", f"{SECRET}\n"),
]


@pytest.mark.parametrize(("var", "value"), _BAD_SETTINGS)
def test_a_setting_the_client_cannot_use_is_a_usage_error_naming_it(var, value):
    """Each of these made the S3 client panic ("internal error (please report)"): a one-line usage error naming the
    variable instead, never its secret value."""
    env = {
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ALLOW_HTTP": "true",
        "TOKSCAN_OBJECT_RETRIES": "0",
        var: value,
    }
    r = cli("scan", "s3://bucket/prefix/", env=env)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and var in lines[0] and "internal error" not in r.stderr, r.stderr
    assert SECRET not in r.stderr + r.stdout


class _ListingServer:
    """An S3-compatible server on a loopback port that answers every ListObjectsV2 with `IsTruncated=true`: the same
    continuation token each time (`fresh=False`), or a new one each time (one more object per page)."""

    def __init__(self, fresh: bool):
        import http.server
        import threading

        self.requests = 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                owner.requests += 1
                n = owner.requests
                token = f"page-{n}" if fresh else "same-token"
                body = (
                    '<?xml version="1.0" encoding="UTF-8"?>'
                    '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                    "<Name>bucket</Name><Prefix>prefix/</Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys>"
                    f"<IsTruncated>true</IsTruncated><NextContinuationToken>{token}</NextContinuationToken>"
                    f"<Contents><Key>prefix/part-{n if fresh else 0}.parquet</Key>"
                    "<LastModified>2024-01-01T00:00:00.000Z</LastModified><ETag>&quot;e&quot;</ETag>"
                    "<Size>10</Size><StorageClass>STANDARD</StorageClass></Contents>"
                    "</ListBucketResult>"
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("fresh", [False, True])
def test_a_listing_that_never_ends_is_an_error_and_leaves_no_staging_directory(tmp_path, fresh):
    """A repeated continuation token is found on the second page; fresh tokens stop at `TOKSCAN_MAX_OBJECTS`. Either
    way: a one-line error naming the URL, within seconds, and the `tokscan-objects-*` directory removed."""
    server = _ListingServer(fresh)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": server.url,
        "AWS_ALLOW_HTTP": "true",
        "TOKSCAN_OBJECT_RETRIES": "0",
        "TOKSCAN_MAX_OBJECTS": "50",
        "TMPDIR": str(tmp),
    }
    try:
        t0 = time.perf_counter()
        try:
            r = subprocess.run(
                [sys.executable, "-m", "tokscan", "scan", "s3://bucket/prefix/"],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, **env},
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"the listing went on for 60 s ({server.requests} requests)")
        line = _one_line_exit_2(r, "s3://bucket/prefix/")
        assert time.perf_counter() - t0 < 30
        if fresh:
            assert "more than 50 objects" in line and "TOKSCAN_MAX_OBJECTS" in line
            assert server.requests <= 51
        else:
            assert "continuation token" in line
            assert server.requests == 2
        assert not list(tmp.glob("tokscan-objects-*"))
    finally:
        server.close()


def test_a_staging_error_names_the_object_not_the_staged_copy(s3_env, corpus, tmp_path):
    """Keys `clash/a` and `clash/a/b.parquet` cannot both be files on disk: the error names the object's URL, not the
    temporary directory it was being staged in, and that directory is removed."""
    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1")
    client.put_object(Bucket=BUCKET, Key="clash/a", Body=b"x" * 100)
    client.put_object(Bucket=BUCKET, Key="clash/a/b.parquet", Body=b"y" * 100)
    url = f"s3://{BUCKET}/clash/"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    line = _one_line_exit_2(cli("scan", url, env={"TMPDIR": str(tmp)}), url)
    assert "tokscan-objects-" not in line and str(tmp) not in line, line
    assert f"{url}a" in line, line
    assert not list(tmp.glob("tokscan-objects-*"))
