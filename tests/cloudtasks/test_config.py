"""Connecting to cloudtasks://PROJECT/LOCATION: URL, credentials, transport and rate settings.

A misconfigured backend fails at connect() with a ConfigurationError that says what to do, before
any request reaches the service.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials

from pullqueue import ConfigurationError, connect
from pullqueue.adapters.cloudtasks import CloudTasksBackend
from tests.support.cloudtasks_fake import CloudTasksModel


@pytest.mark.parametrize(
    "url",
    [
        "cloudtasks://my-app",
        "cloudtasks:///us-central1",
        "cloudtasks://my-app/us-central1/extra",
        "cloudtasks://my-app/us-central1?transport=rest",
    ],
)
def test_a_url_without_exactly_project_and_location_is_refused(url: str) -> None:
    with pytest.raises(ConfigurationError, match="cloudtasks://PROJECT/LOCATION"):
        connect(url, credentials=AnonymousCredentials())


def test_the_url_names_project_and_location() -> None:
    backend = connect("cloudtasks://my-app/europe-west1", credentials=AnonymousCredentials())

    assert isinstance(backend, CloudTasksBackend)
    assert backend.url == "cloudtasks://my-app/europe-west1"
    assert backend.queue_path("q") == "projects/my-app/locations/europe-west1/queues/q"
    backend.close()


def test_an_unknown_option_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match="lease_requests_per_second"):
        connect(
            "cloudtasks://my-app/us-central1", credentials=AnonymousCredentials(), tranport="rest"
        )


def test_missing_credentials_fail_at_connect_with_how_to_provide_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, service: CloudTasksModel
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing-key.json"))

    with pytest.raises(ConfigurationError) as caught:
        connect(service.url, transport="rest")

    message = str(caught.value)
    assert "gcloud auth application-default login" in message
    assert "GOOGLE_APPLICATION_CREDENTIALS" in message
    assert service.calls == []


def test_no_application_default_credentials_at_all(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    monkeypatch.setenv("NO_GCE_CHECK", "True")

    with pytest.raises(ConfigurationError, match="application-default login"):
        connect("cloudtasks://my-app/us-central1")


def test_transport_is_grpc_by_default_and_rest_by_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PULLQUEUE_CLOUDTASKS_TRANSPORT", raising=False)
    grpc = connect("cloudtasks://my-app/us-central1", credentials=AnonymousCredentials())
    monkeypatch.setenv("PULLQUEUE_CLOUDTASKS_TRANSPORT", "rest")
    rest = connect("cloudtasks://my-app/us-central1", credentials=AnonymousCredentials())

    assert isinstance(grpc, CloudTasksBackend) and isinstance(rest, CloudTasksBackend)
    assert (grpc.transport, rest.transport) == ("grpc", "rest")
    assert type(grpc._client.transport).__name__ == "CloudTasksGrpcTransport"
    assert type(rest._client.transport).__name__ == "CloudTasksRestTransport"
    grpc.close()
    rest.close()


def test_an_unknown_transport_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="grpc, rest"):
        connect(
            "cloudtasks://my-app/us-central1", credentials=AnonymousCredentials(), transport="x"
        )


def test_the_lease_rate_comes_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PULLQUEUE_LEASE_REQUESTS_PER_SECOND", "4")

    backend = connect("cloudtasks://my-app/us-central1", credentials=AnonymousCredentials())

    assert isinstance(backend, CloudTasksBackend)
    assert backend.lease_requests_per_second == 4.0
    backend.close()
