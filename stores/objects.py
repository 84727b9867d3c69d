"""Object store for uploads and processing copies: a directory (embedded) or S3.

Bytes stay out of Kafka and ClickHouse; records carry keys. The layout (uploads and
the files of each job, under one prefix per job so they go with one ``delete_prefix``)
is declared in ``topologies.objects``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from schemas.errors import InternalError, UpstreamUnavailable

__all__ = ["ObjectStore", "FileStore", "S3Store", "ObjectInfo", "ObjectMissing"]


class ObjectMissing(KeyError):
    pass


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    modified: float


class ObjectStore(Protocol):
    async def put_bytes(self, key: str, data: bytes) -> None: ...
    async def get_bytes(self, key: str) -> bytes: ...
    async def put_file(self, key: str, path: Path) -> None: ...
    def local_copy(self, key: str) -> contextlib.AbstractAsyncContextManager[Path]: ...
    def writer(self, key: str) -> contextlib.AbstractAsyncContextManager[IO[bytes]]: ...
    async def exists(self, key: str) -> bool: ...
    async def info(self, key: str) -> ObjectInfo: ...
    async def delete(self, key: str) -> None: ...
    async def delete_prefix(self, prefix: str) -> int: ...
    async def list(self, prefix: str) -> list[ObjectInfo]: ...
    async def ping(self) -> float: ...


class FileStore:
    """Objects as files under ``root``; writes land atomically (temp file, then rename)."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root.resolve()  # once: every object call checks against it

    def path(self, key: str) -> Path:
        """The file of ``key``, checked by its text alone: a key is relative, and none of
        its parts is empty, ``.`` or ``..`` (so it names a path below the root, which is
        resolved once). The store makes no links, so nothing below the root leads out;
        resolving each key (a ``lstat`` per part, some 25 a job) would only say that again."""
        parts = key.split("/")
        if key.startswith("/") or "\0" in key or "\\" in key or \
                any(p in ("", ".", "..") for p in parts[:-1]) or parts[-1] in (".", ".."):
            raise InternalError(log=f"object key escapes the store: {key!r}")
        return self.root.joinpath(*(p for p in parts if p))

    async def put_bytes(self, key: str, data: bytes) -> None:
        with self._atomic(key) as fh:
            fh.write(data)

    async def get_bytes(self, key: str) -> bytes:
        try:
            return self.path(key).read_bytes()
        except FileNotFoundError as exc:
            raise ObjectMissing(key) from exc

    async def put_file(self, key: str, path: Path) -> None:
        with self._atomic(key) as fh, open(path, "rb") as src:
            shutil.copyfileobj(src, fh, 1 << 20)

    @contextlib.asynccontextmanager
    async def local_copy(self, key: str) -> AsyncIterator[Path]:
        path = self.path(key)
        if not path.is_file():
            raise ObjectMissing(key)
        yield path

    @contextlib.asynccontextmanager
    async def writer(self, key: str) -> AsyncIterator[IO[bytes]]:
        with self._atomic(key) as fh:
            yield fh

    @contextlib.contextmanager
    def _atomic(self, key: str) -> Iterator[IO[bytes]]:
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                yield fh
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    async def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    async def info(self, key: str) -> ObjectInfo:
        try:
            st = self.path(key).stat()
        except FileNotFoundError as exc:
            raise ObjectMissing(key) from exc
        return ObjectInfo(key, st.st_size, st.st_mtime)

    async def delete(self, key: str) -> None:
        path = self.path(key)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        for parent in path.parents:  # prune emptied folders so nothing of a job lingers
            if parent == self.root or not parent.is_relative_to(self.root):
                break
            try:
                parent.rmdir()
            except OSError:
                break

    async def delete_prefix(self, prefix: str) -> int:
        items = await self.list(prefix)
        for item in items:
            await self.delete(item.key)
        base = self.path(prefix)
        if base.is_dir():
            shutil.rmtree(base, ignore_errors=True)
        return len(items)

    async def list(self, prefix: str) -> list[ObjectInfo]:
        base = self.path(prefix.rstrip("/")) if prefix.strip("/") else self.root
        if base.is_file():
            st = base.stat()
            return [ObjectInfo(prefix, st.st_size, st.st_mtime)]
        if not base.is_dir():
            return []
        out = []
        for path in base.rglob("*"):
            if path.is_file() and not path.name.startswith(".tmp-"):
                st = path.stat()
                out.append(ObjectInfo(str(path.relative_to(self.root)), st.st_size, st.st_mtime))
        return out

    async def ping(self) -> float:
        started = time.perf_counter()
        if not os.access(self.root, os.W_OK):
            raise UpstreamUnavailable(log=f"object store {self.root} is not writable")
        return (time.perf_counter() - started) * 1000


class S3Store:
    """The same interface over S3 (boto3), for distributed deployments; calls run in a thread."""

    def __init__(self, *, endpoint: str, bucket: str, region: str, access_key: str,
                 secret_key: str) -> None:
        import boto3
        from botocore.config import Config
        self.bucket = bucket
        self.client = boto3.client(
            "s3", endpoint_url=endpoint or None, region_name=region,
            aws_access_key_id=access_key or None, aws_secret_access_key=secret_key or None,
            config=Config(signature_version="s3v4", retries={"max_attempts": 3},
                          s3={"addressing_style": "path"}))

    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError
        def call() -> Any:
            try:
                return fn(*args, **kwargs)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                if code in ("NoSuchKey", "404", "NotFound"):
                    raise ObjectMissing(kwargs.get("Key", "")) from exc
                raise InternalError(log=f"s3: {exc}") from exc
            except BotoCoreError as exc:
                raise UpstreamUnavailable(log=f"s3: {exc}") from exc
        return await asyncio.to_thread(call)

    async def ensure_bucket(self) -> None:
        from botocore.exceptions import ClientError
        try:
            await asyncio.to_thread(self.client.head_bucket, Bucket=self.bucket)
        except ClientError:
            await self._run(self.client.create_bucket, Bucket=self.bucket)

    async def put_bytes(self, key: str, data: bytes) -> None:
        await self._run(self.client.put_object, Bucket=self.bucket, Key=key, Body=data)

    async def get_bytes(self, key: str) -> bytes:
        resp = await self._run(self.client.get_object, Bucket=self.bucket, Key=key)
        return await asyncio.to_thread(resp["Body"].read)

    async def put_file(self, key: str, path: Path) -> None:
        await self._run(self.client.upload_file, str(path), self.bucket, key)

    @contextlib.asynccontextmanager
    async def local_copy(self, key: str) -> AsyncIterator[Path]:
        with tempfile.TemporaryDirectory(prefix="a5s-s3-") as tmp:
            path = Path(tmp) / "object"
            await self._run(self.client.download_file, self.bucket, key, str(path))
            yield path

    @contextlib.asynccontextmanager
    async def writer(self, key: str) -> AsyncIterator[IO[bytes]]:
        with tempfile.NamedTemporaryFile(prefix="a5s-s3-") as fh:
            yield fh
            fh.flush()
            await self.put_file(key, Path(fh.name))

    async def exists(self, key: str) -> bool:
        try:
            await self.info(key)
        except ObjectMissing:
            return False
        return True

    async def info(self, key: str) -> ObjectInfo:
        head = await self._run(self.client.head_object, Bucket=self.bucket, Key=key)
        return ObjectInfo(key, int(head["ContentLength"]), head["LastModified"].timestamp())

    async def delete(self, key: str) -> None:
        await self._run(self.client.delete_object, Bucket=self.bucket, Key=key)

    async def delete_prefix(self, prefix: str) -> int:
        items = await self.list(prefix)
        for item in items:
            await self.delete(item.key)
        return len(items)

    async def list(self, prefix: str) -> list[ObjectInfo]:
        out: list[ObjectInfo] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
            if token:
                kwargs["ContinuationToken"] = token
            page = await self._run(self.client.list_objects_v2, **kwargs)
            for obj in page.get("Contents", []):
                out.append(ObjectInfo(obj["Key"], int(obj["Size"]),
                                      obj["LastModified"].timestamp()))
            if not page.get("IsTruncated"):
                return out
            token = page.get("NextContinuationToken")

    def presign_put(self, key: str, expires_s: int) -> str:
        return self.client.generate_presigned_url(
            "put_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_s)

    async def ping(self) -> float:
        started = time.perf_counter()
        await self._run(self.client.head_bucket, Bucket=self.bucket)
        return (time.perf_counter() - started) * 1000
