"""The object store: the filesystem implementation, and the S3 one against a real S3 server (nanio)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.embedded import wait_port
from schemas.errors import InternalError
from stores.objects import FileStore, ObjectMissing, S3Store
from ops.stack import free_port


@pytest.fixture
def fs(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "objects")


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Store]:
    root = tmp_path_factory.mktemp("nanio")
    port = free_port()
    nanio = shutil.which("nanio", path=str(Path(sys.executable).parent))
    assert nanio, "nanio (a dependency) is not installed next to this interpreter"
    proc = subprocess.Popen([nanio, "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--data-dir", str(root), "--no-access-log", "--log-level", "warning"],
                            env={**os.environ, "NANIO_ACCESS_KEY": "testkey",
                                 "NANIO_SECRET_KEY": "testsecret1234"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, 20, proc)
        yield S3Store(endpoint=f"http://127.0.0.1:{port}", bucket="a5s-test", region="us-east-1",
                      access_key="testkey", secret_key="testsecret1234")
    finally:
        proc.terminate()
        proc.wait(10)


async def _roundtrip(store: FileStore | S3Store, tmp_path: Path) -> None:
    await store.put_bytes("jobs/tr_1/spec.json", b'{"a": 1}')
    assert await store.get_bytes("jobs/tr_1/spec.json") == b'{"a": 1}'
    assert await store.exists("jobs/tr_1/spec.json")
    async with store.writer("jobs/tr_1/audio.pcm") as fh:
        for _ in range(4):
            fh.write(b"\x01\x02" * 100_000)
    info = await store.info("jobs/tr_1/audio.pcm")
    assert info.size == 800_000
    async with store.local_copy("jobs/tr_1/audio.pcm") as path:
        assert path.stat().st_size == 800_000
    src = tmp_path / "upload.bin"
    src.write_bytes(os.urandom(70_000))
    await store.put_file("uploads/file_1", src)
    assert await store.get_bytes("uploads/file_1") == src.read_bytes()
    keys = sorted(i.key for i in await store.list("jobs/tr_1/"))
    assert keys == ["jobs/tr_1/audio.pcm", "jobs/tr_1/spec.json"]
    assert await store.delete_prefix("jobs/tr_1/") == 2
    assert await store.list("jobs/tr_1/") == []
    await store.delete("uploads/file_1")
    assert not await store.exists("uploads/file_1")
    with pytest.raises(ObjectMissing):
        await store.get_bytes("uploads/file_1")
    await store.delete("uploads/never-was")  # deleting twice is harmless


async def test_file_store_roundtrip(fs: FileStore, tmp_path: Path) -> None:
    await _roundtrip(fs, tmp_path)
    assert not (fs.root / "jobs" / "tr_1").exists(), "emptied folders are pruned"


async def test_file_store_under_a_symlinked_root(tmp_path: Path) -> None:
    """A data directory reached through a symlink lists keys relative to the store."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    store = FileStore(tmp_path / "link" / "objects")
    await _roundtrip(store, tmp_path)
    assert not (tmp_path / "real" / "objects" / "jobs" / "tr_1").exists()


async def test_file_store_refuses_escaping_keys(fs: FileStore) -> None:
    with pytest.raises(Exception):
        await fs.put_bytes("../outside", b"x")


async def test_file_store_checks_every_key_without_resolving_it(fs: FileStore) -> None:
    """Every way out of the root is refused by the key's text; keys below it are served."""
    for key in ("/etc/passwd", "jobs/../../outside", "jobs/tr_1/..", "..", "jobs/./x",
                "jobs//x", "jobs\\..\\x", "jobs/x\0"):
        with pytest.raises(InternalError):
            fs.path(key)
        with pytest.raises(InternalError):
            await fs.put_bytes(key, b"x")
    assert fs.path("jobs/tr_1/spec.json") == fs.root / "jobs" / "tr_1" / "spec.json"
    assert fs.path("jobs/tr_1/") == fs.root / "jobs" / "tr_1"
    assert not any(p.is_file() for p in fs.root.parent.rglob("*"))


async def test_file_store_write_is_atomic(fs: FileStore) -> None:
    with pytest.raises(RuntimeError):
        async with fs.writer("uploads/partial") as fh:
            fh.write(b"half")
            raise RuntimeError("client went away")
    assert not await fs.exists("uploads/partial")
    assert await fs.list("uploads/") == []


async def test_s3_store_roundtrip(s3: S3Store, tmp_path: Path) -> None:
    await s3.ensure_bucket()
    assert await s3.ping() >= 0
    await _roundtrip(s3, tmp_path)


async def test_s3_presigned_put_is_a_real_presigned_url(s3: S3Store) -> None:
    import httpx
    await s3.ensure_bucket()
    url = s3.presign_put("uploads/file_presigned", 3600)
    assert "X-Amz-Signature" in url
    resp = httpx.put(url, content=b"abc" * 1000)
    assert resp.status_code == 200, resp.text
    assert await s3.get_bytes("uploads/file_presigned") == b"abc" * 1000
    tampered = url.replace("X-Amz-Signature=", "X-Amz-Signature=0")
    assert httpx.put(tampered, content=b"x").status_code == 403
