"""Object storage: one class a cloud, used by the instance agent and the launching side alike.

Each class needs only its cloud's storage library (boto3, google-cloud-storage,
azure-storage-blob), imported where used; keys are relative to the bucket (an Azure container).
"""

from __future__ import annotations

import os
from typing import Any

ENV_AZURE_CONNECTION = "AZURE_STORAGE_CONNECTION_STRING"
# The client id of an Azure ML compute's user-assigned identity, which Azure ML sets in jobs
ENV_AML_IDENTITY = "DEFAULT_IDENTITY_CLIENT_ID"


class Store:
    """A bucket through the few calls easylaunch needs; keys are relative to the bucket."""

    scheme = ""

    def __init__(self, bucket: str, client: Any) -> None:
        self.bucket = bucket
        self.client = client

    @classmethod
    def default(cls, bucket: str, region: str) -> Store:
        """The bucket ``bucket`` with the credentials this machine has (``region``: the
        cloud's region, or Azure's blob endpoint)."""
        raise NotImplementedError

    def url(self, key: str) -> str:
        """The object's URL, e.g. ``gs://bucket/key``."""
        return f"{self.scheme}://{self.bucket}/{key}"

    def exists(self, key: str) -> bool:
        raise NotImplementedError

    def get(self, key: str) -> bytes | None:
        """The object under ``key``, or None if there is none."""
        raise NotImplementedError

    def put_bytes(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def put_file(self, key: str, path: str | os.PathLike) -> None:
        raise NotImplementedError

    def list(self, prefix: str) -> list[str]:
        """Keys under ``prefix``."""
        raise NotImplementedError

    def create(self, key: str, data: bytes) -> bool:
        """Write ``key`` only if no object has that name yet; False if one has. Of two callers
        at once, exactly one gets True (the store decides, not the callers)."""
        raise NotImplementedError

    def bucket_exists(self) -> bool:
        """Whether the bucket is there (an error: it cannot be reached with these
        credentials)."""
        raise NotImplementedError


def aws_error_code(exc: Exception) -> str:
    """The error code of a botocore ClientError ("NoSuchKey", "404"...), or ""."""
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


class S3Store(Store):
    """An S3 bucket through boto3."""

    scheme = "s3"
    NOT_FOUND = ("NoSuchKey", "404", "NotFound", "NoSuchBucket")

    @classmethod
    def default(cls, bucket: str, region: str) -> S3Store:
        import boto3

        return cls(bucket, boto3.client("s3", region_name=region))

    def _missing(self, exc: Exception) -> bool:
        return aws_error_code(exc) in self.NOT_FOUND

    def bucket_exists(self) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if self._missing(exc):
                return False
            raise
        return True

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if self._missing(exc):
                return False
            raise
        return True

    def get(self, key: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if self._missing(exc):
                return None
            raise

    def put_bytes(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def put_file(self, key: str, path: str | os.PathLike) -> None:
        self.client.upload_file(os.fspath(path), self.bucket, key)

    def list(self, prefix: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    def create(self, key: str, data: bytes) -> bool:
        """A conditional PUT (``If-None-Match: *``)."""
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            if aws_error_code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise
        return True


class GcsStore(Store):
    """A Google Cloud Storage bucket through google-cloud-storage (no gsutil)."""

    scheme = "gs"

    @classmethod
    def default(cls, bucket: str, region: str = "") -> GcsStore:
        from google.cloud import storage

        return cls(bucket, storage.Client())

    def _blob(self, key: str) -> Any:
        return self.client.bucket(self.bucket).blob(key)

    def bucket_exists(self) -> bool:
        return self.client.bucket(self.bucket).exists()

    def exists(self, key: str) -> bool:
        return self._blob(key).exists()

    def get(self, key: str) -> bytes | None:
        from google.api_core.exceptions import NotFound

        try:
            return self._blob(key).download_as_bytes()
        except NotFound:
            return None

    def put_bytes(self, key: str, data: bytes) -> None:
        self._blob(key).upload_from_string(data)

    def put_file(self, key: str, path: str | os.PathLike) -> None:
        self._blob(key).upload_from_filename(os.fspath(path))

    def list(self, prefix: str) -> list[str]:
        return [b.name for b in self.client.list_blobs(self.bucket, prefix=prefix)]

    def create(self, key: str, data: bytes) -> bool:
        """An upload on the condition that no generation of the object exists."""
        from google.api_core.exceptions import PreconditionFailed

        try:
            self._blob(key).upload_from_string(data, if_generation_match=0)
        except PreconditionFailed:
            return False
        return True


class AzureBlobStore(Store):
    """An Azure Blob Storage container through azure-storage-blob. The client comes from
    ``AZURE_STORAGE_CONNECTION_STRING`` where it is set (Azurite's development account, a
    cluster configured so), else from the account's URL with azure-identity's
    ``DefaultAzureCredential`` (a managed identity, ``az login``): no key travels."""

    scheme = "az"

    @classmethod
    def default(cls, bucket: str, region: str = "") -> AzureBlobStore:
        """The container ``bucket`` of the account whose blob endpoint is ``region``."""
        connection = os.environ.get(ENV_AZURE_CONNECTION)
        credential = None
        if not connection:
            from azure.identity import DefaultAzureCredential

            credential = DefaultAzureCredential(
                managed_identity_client_id=os.environ.get(ENV_AML_IDENTITY))
        return cls.connect(bucket, region, connection, credential)

    @classmethod
    def connect(cls, bucket: str, account_url: str | None, connection: str | None,
                credential: Any) -> AzureBlobStore:
        """The container ``bucket``: through ``connection`` (a connection string) where there
        is one, else on ``account_url`` with ``credential``."""
        from azure.storage.blob import BlobServiceClient

        service = (BlobServiceClient.from_connection_string(connection) if connection
                   else BlobServiceClient(account_url,  # type: ignore[arg-type]
                                          credential=credential))
        # (account_url None with no connection string: the SDK's ValueError says it is missing)
        return cls(bucket, service.get_container_client(bucket))

    @property
    def account_url(self) -> str:
        """The account's blob endpoint (what ``default`` takes as ``region``)."""
        return self.client.url.rsplit("/", 1)[0]

    def exists(self, key: str) -> bool:
        return self.client.get_blob_client(key).exists()

    def get(self, key: str) -> bytes | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return self.client.download_blob(key).readall()
        except ResourceNotFoundError:
            return None

    def put_bytes(self, key: str, data: bytes) -> None:
        self.client.upload_blob(key, data, overwrite=True)

    def put_file(self, key: str, path: str | os.PathLike) -> None:
        with open(path, "rb") as data:
            self.client.upload_blob(key, data, overwrite=True)

    def list(self, prefix: str) -> list[str]:
        return [b.name for b in self.client.list_blobs(name_starts_with=prefix)]

    def create(self, key: str, data: bytes) -> bool:
        """An upload on the condition that no blob of that name exists (``If-None-Match``)."""
        from azure.core.exceptions import ResourceExistsError

        try:
            self.client.upload_blob(key, data, overwrite=False)
        except ResourceExistsError:
            return False
        return True

    def bucket_exists(self) -> bool:
        return self.client.exists()


STORES: dict[str, type[Store]] = {"s3": S3Store, "gs": GcsStore, "az": AzureBlobStore}
