"""The SDK's own datastore_v3 stub served over the App Engine API protocol (`POST /rpc_http`).

Real Google code as a shared datastore for tests with several processes: the compat layer's
workers (API_HOST/API_PORT pointed here), `pullqueue sweep --datastore appengine://HOST:PORT`,
and the bridge's --upstream. One lock serialises calls, as the stub expects one caller at a time.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.appengine.api import api_base_pb2, apiproxy_stub_map
from google.appengine.api.datastore_file_stub import DatastoreFileStub
from google.appengine.datastore import datastore_pb, datastore_stub_util
from google.appengine.runtime import apiproxy_errors

from pullqueue.bridge.proto.remote_api_pb2 import Request, Response

APP_ID = "s~pullqueue-test"

_MESSAGES: dict[str, tuple[Any, Any]] = {
    "Get": (datastore_pb.GetRequest, datastore_pb.GetResponse),
    "Put": (datastore_pb.PutRequest, datastore_pb.PutResponse),
    "Delete": (datastore_pb.DeleteRequest, datastore_pb.DeleteResponse),
    "RunQuery": (datastore_pb.Query, datastore_pb.QueryResult),
    "Next": (datastore_pb.NextRequest, datastore_pb.QueryResult),
    "BeginTransaction": (datastore_pb.BeginTransactionRequest, datastore_pb.Transaction),
    "Commit": (datastore_pb.Transaction, datastore_pb.CommitResponse),
    "Rollback": (datastore_pb.Transaction, api_base_pb2.VoidProto),
    "AllocateIds": (datastore_pb.AllocateIdsRequest, datastore_pb.AllocateIdsResponse),
    "DeleteCursor": (datastore_pb.Cursor, api_base_pb2.VoidProto),
}


class DatastoreServer:
    """The SDK's DatastoreFileStub (consistent, in memory unless `path`) at 127.0.0.1:port."""

    def __init__(self, path: str | None = None, port: int = 0, app_id: str = APP_ID) -> None:
        self.stub = DatastoreFileStub(
            app_id,
            path,
            save_changes=path is not None,
            consistency_policy=datastore_stub_util.PseudoRandomHRConsistencyPolicy(probability=1),
        )
        self.calls: dict[str, int] = {}
        lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                call = Request.FromString(body)
                answer = Response()
                kinds = _MESSAGES.get(call.method)
                if call.service_name != "datastore_v3" or kinds is None:
                    answer.rpc_error.code = 5  # CALL_NOT_FOUND
                    answer.rpc_error.detail = f"{call.service_name}.{call.method} not served"
                else:
                    request, response = kinds[0].FromString(call.request), kinds[1]()
                    try:
                        with lock:
                            server.calls[call.method] = server.calls.get(call.method, 0) + 1
                            server.stub.MakeSyncCall("datastore_v3", call.method, request, response)
                        answer.response = response.SerializeToString()
                    except apiproxy_errors.ApplicationError as exc:
                        answer.application_error.code = exc.application_error
                        answer.application_error.detail = exc.error_detail
                data = answer.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._http = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._http.daemon_threads = True
        self.port = self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> DatastoreServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()


def use_datastore_at(host: str) -> None:
    """Point this process's datastore_v3 calls (ndb, db, the outbox) at the server at host."""
    import os

    from google.appengine.runtime import default_api_stub

    address, _, port = host.rpartition(":")
    os.environ.update(API_HOST=address, API_PORT=port, APPLICATION_ID=APP_ID)
    os.environ["GAE_APPLICATION"] = APP_ID
    os.environ["HTTP_X_APPENGINE_API_TICKET"] = "pullqueue-test"
    default_api_stub.DefaultApiStub.SetUseRequestSecurityTicketForThread(True)
    apiproxy_stub_map.apiproxy = apiproxy_stub_map.APIProxyStubMap()
    apiproxy_stub_map.apiproxy.RegisterStub("datastore_v3", default_api_stub.DefaultApiStub())


def ids_of(server: DatastoreServer, kind: str, app_id: str = APP_ID) -> set[int]:
    """The numeric ids of every entity of kind in the server's default namespace."""
    query = datastore_pb.Query(app=app_id, kind=kind, keys_only=True)
    result = datastore_pb.QueryResult()
    server.stub.MakeSyncCall("datastore_v3", "RunQuery", query, result)
    ids = {entity.key.path.element[-1].id for entity in result.result}
    while result.more_results:
        more = datastore_pb.QueryResult()
        server.stub.MakeSyncCall(
            "datastore_v3", "Next", datastore_pb.NextRequest(cursor=result.cursor, count=1000), more
        )
        ids |= {entity.key.path.element[-1].id for entity in more.result}
        result = more
    return ids
