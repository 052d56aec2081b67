"""A gRPC layer in front of the Pub/Sub emulator that answers like the service, one knob each.

The emulator answers a call in about a millisecond, returns everything waiting, answers an empty
pull at once, ignores filters and takes any ack deadline; Pub/Sub does none of that. Tests and
benchmarks point PUBSUB_EMULATOR_HOST at this layer to see pullqueue as a user on the service
would, and count the calls and rounds of calls each operation makes (docs/pubsub.md, "The
realistic layer", lists where it still differs from the service).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc  # type: ignore[import-untyped]
from google.pubsub_v1.types import pubsub as pb_types

_PULL = pb_types.PullRequest.pb()
_PULL_RESPONSE = pb_types.PullResponse.pb()
_ACK = pb_types.AcknowledgeRequest.pb()
_MODIFY = pb_types.ModifyAckDeadlineRequest.pb()
_SUBSCRIPTION = pb_types.Subscription.pb()
_UPDATE = pb_types.UpdateSubscriptionRequest.pb()
_GET = pb_types.GetSubscriptionRequest.pb()
_DELETE = pb_types.DeleteSubscriptionRequest.pb()

_SUB = "/google.pubsub.v1.Subscriber/"
_STREAMING = {_SUB + "StreamingPull"}
MAX_ACK_DEADLINE = 600
"""The service's longest ack deadline, in seconds."""
_UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
_POLL = 0.02
"""Seconds between the emulator pulls behind one held empty pull."""
EMULATOR_PULL_MOST = 100
"""Most messages the emulator answers one pull with, whatever is asked (the service: 1000)."""
AS_SERVICE_ENV = "TAGBENCH_AS_SERVICE"
"""Set in the environment of benchmark processes whose adapters talk to the layer, so that they
start as on the service (start_as_on_the_service)."""


def start_as_on_the_service(rpc: Any) -> None:
    """Let an adapter behind the layer take empty pulls as held from the start, as a client of
    Pub/Sub itself does off an emulator host (PubSubRpc.holds_empty_pulls), which the layer's
    emulator host hides from it; unless a pull already told."""
    if rpc.holds_empty_pulls is None:
        rpc.holds_empty_pulls = True


@dataclass
class Knobs:
    """How the layer answers; the defaults make it a plain counting proxy."""

    rtt: float = 0.0
    """Seconds of one round trip: half before the emulator sees a call, half for its answer."""
    partial: bool = False
    """A pull asks the emulator for a random share (1..all) of the messages it asked for, and
    brings up to that share: past the emulator's 100 a pull, in further pulls of it."""
    filters: bool = False
    """Subscription filters are applied: a message that fails one is acked, never delivered."""
    hold_empty: bool = False
    """An empty pull is held until a message comes or the call's deadline passes."""
    cap: bool = False
    """Ack deadlines over 600 s are refused with INVALID_ARGUMENT."""
    lost_acks: float = 0.0
    """Share of acknowledged ids silently dropped (they come back at their ack deadline)."""
    slow_answers: float = 0.0
    """Seconds more a pull that brings messages takes to answer (a loaded server or link): an
    answer arriving after the client's deadline is lost, its messages out until their ack
    deadline."""
    slow_only: str = ""
    """`slow_answers` applies to the subscriptions whose name holds this (all when empty)."""
    blind_glances: float = 0.0
    """Share of pulls with `return_immediately` answered empty though messages wait: the
    service answers such a pull with what it has at hand, which may be nothing."""

    @classmethod
    def service(cls, rtt: float = 0.03, *, lost_acks: float = 0.0) -> Knobs:
        """Every knob on, as the service answers a client on a GCE VM."""
        return cls(
            rtt=rtt, partial=True, filters=True, hold_empty=True, cap=True, lost_acks=lost_acks
        )


@dataclass(frozen=True)
class Call:
    method: str
    start: float
    end: float


class Calls:
    """The calls seen between `with layer.counting() as calls:` and its end."""

    def __init__(self) -> None:
        self._calls: list[Call] = []
        self._held = 0

    @property
    def count(self) -> int:
        return len(self._calls)

    def by_method(self) -> Counter[str]:
        return Counter(call.method for call in self._calls)

    def of(self, method: str) -> list[Call]:
        """The calls of `method`, in the order they ended."""
        return [c for c in self._calls if c.method == method]

    def lasting(self, method: str, seconds: float, *, since: float = -math.inf) -> int:
        """Calls of `method` that took `seconds` or longer (a pull held to its deadline), of
        those begun at `since` (time.monotonic()) or later."""
        return sum(
            1
            for c in self._calls
            if c.method == method and c.end - c.start >= seconds and c.start >= since
        )

    def held(self) -> int:
        """Pulls begun in the block that the layer found empty and held (`hold_empty`), counted
        as the hold begins (a pull held to its deadline ends after the block): unlike calls'
        lengths, a count a loaded host does not change."""
        return self._held

    def rounds(self, *methods: str) -> int:
        """Round trips one after another: the longest chain of calls (of `methods`, when
        given) each begun after the previous one answered (calls side by side are one round)."""
        ordered = sorted(
            (c for c in self._calls if not methods or c.method in methods), key=lambda c: c.end
        )
        ends: list[tuple[float, int]] = []  # (end, chain length) in end order
        best = 0
        for call in ordered:
            before = max((n for end, n in ends if end <= call.start), default=0)
            ends.append((call.end, before + 1))
            best = max(best, before + 1)
        return best

    def _add(self, call: Call) -> None:
        self._calls.append(call)  # calls begun before the block (left running) are not here


# -- filters -------------------------------------------------------------------------------

_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<op>!=|=|:|\(|\)|,)|(?P<word>[A-Za-z_][\w.-]*))'
)


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"bad filter at {text[pos:]!r}")
        out.append(match.group(0).strip())
        pos = match.end()
    return out


Predicate = Callable[[dict[str, str]], bool]


def parse_filter(text: str) -> Predicate:
    """The subset of Pub/Sub's filter language pullqueue and its users write: attributes.K =
    "v", !=, attributes:K, hasPrefix(attributes.K, "p"), NOT, AND, OR and parentheses."""
    if not text.strip():
        return lambda _attrs: True
    tokens = _tokens(text)
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        token = tokens[pos]
        pos += 1
        return token

    def value() -> str:
        token = take()
        if not token.startswith('"'):
            raise ValueError(f"expected a string in {text!r}")
        return bytes(token[1:-1], "utf-8").decode("unicode_escape")

    def key(token: str) -> str:
        if not token.startswith("attributes."):
            raise ValueError(f"unsupported field {token!r} in {text!r}")
        return token.removeprefix("attributes.")

    def atom() -> Predicate:
        token = take()
        if token == "(":
            inner = disjunction()
            take()
            return inner
        if token in ("NOT", "-"):
            inner = atom()
            return lambda attrs: not inner(attrs)
        if token == "hasPrefix":
            take()
            name = key(take())
            take()
            prefix = value()
            take()
            return lambda attrs: attrs.get(name, "").startswith(prefix) and name in attrs
        if token == "attributes":
            if take() != ":":
                raise ValueError(f"expected ':' after attributes in {text!r}")
            name = take()
            return lambda attrs: name in attrs
        name = key(token)
        op = take()
        wanted = value()
        if op == "=":
            return lambda attrs: attrs.get(name) == wanted
        if op == "!=":
            return lambda attrs: attrs.get(name) != wanted
        raise ValueError(f"unsupported operator {op!r} in {text!r}")

    def conjunction() -> Predicate:
        parts = [atom()]
        while peek() == "AND":
            take()
            parts.append(atom())
        return lambda attrs: all(part(attrs) for part in parts)

    def disjunction() -> Predicate:
        parts = [conjunction()]
        while peek() == "OR":
            take()
            parts.append(conjunction())
        return lambda attrs: any(part(attrs) for part in parts)

    predicate = disjunction()
    if pos != len(tokens):
        raise ValueError(f"unexpected {tokens[pos]!r} in filter {text!r}")
    return predicate


# -- the layer -----------------------------------------------------------------------------


class RealisticPubSub:
    """A gRPC server on 127.0.0.1 forwarding every Pub/Sub call to `target` with `knobs`.

    Knobs may be changed while it runs (`layer.knobs.rtt = 0.01`). Calls are recorded for
    `counting()`; `address` is what PUBSUB_EMULATOR_HOST should be.
    """

    def __init__(self, target: str, knobs: Knobs | None = None, *, seed: int | None = None):
        self.target = target
        self.knobs = knobs or Knobs()
        self._random = random.Random(seed)
        self._channel = grpc.insecure_channel(target, options=_UNLIMITED)
        self._filters: dict[str, Predicate] = {}
        self._lock = threading.Lock()
        self._watchers: list[Calls] = []
        self.totals: Counter[str] = Counter()
        self.dropped: list[bytes] = []
        """The payloads of the messages in pull answers dropped as arriving after the client's
        deadline (out until their ack deadline: late, not lost), in the order dropped."""
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=400, thread_name_prefix="realpubsub"),
            options=_UNLIMITED,
        )
        self._server.add_generic_rpc_handlers([_Handler(self)])
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.stop(grace=0).wait()
        self._channel.close()

    def __enter__(self) -> RealisticPubSub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def counting(self) -> Iterator[Calls]:
        """Record every call answered while the block runs."""
        calls = Calls()
        with self._lock:
            self._watchers.append(calls)
        try:
            yield calls
        finally:
            with self._lock:
                self._watchers.remove(calls)

    @contextlib.contextmanager
    def as_emulator(self) -> Iterator[None]:
        """PUBSUB_EMULATOR_HOST is this layer inside the block (clients made there use it)."""
        before = os.environ.get("PUBSUB_EMULATOR_HOST")
        os.environ["PUBSUB_EMULATOR_HOST"] = self.address
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("PUBSUB_EMULATOR_HOST", None)
            else:
                os.environ["PUBSUB_EMULATOR_HOST"] = before

    # -- per call ------------------------------------------------------------------------------

    def _watching(self) -> list[Calls]:
        """The counting blocks open as a call begins: they count it, even when it ends after
        they closed (a pull held to the client's deadline)."""
        with self._lock:
            return list(self._watchers)

    def _record(self, method: str, start: float, watchers: list[Calls]) -> None:
        call = Call(method.rsplit("/", 1)[-1], start, time.monotonic())
        with self._lock:
            self.totals[call.method] += 1
            for watcher in watchers:
                watcher._add(call)

    def _upstream(self, method: str) -> Callable[..., bytes]:
        return self._channel.unary_unary(method)  # type: ignore[no-any-return]

    def unary(self, method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
        start = time.monotonic()
        watchers = self._watching()
        half = self.knobs.rtt / 2
        try:
            if half:
                time.sleep(half)
            answer = self._answer(method, request, context, watchers)
            if half:
                time.sleep(half)
            remaining = context.time_remaining()
            if remaining is not None and remaining <= 0:
                # Arrived after the client's deadline: lost (the client saw DEADLINE_EXCEEDED).
                if method.endswith("/Pull"):
                    late = _PULL_RESPONSE.FromString(answer).received_messages
                    with self._lock:
                        self.dropped.extend(m.message.data for m in late)
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed in transit")
            return answer
        finally:
            self._record(method, start, watchers)

    def _forward(self, method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
        remaining = context.time_remaining()
        timeout = None if remaining is None else max(remaining - self.knobs.rtt / 2, 0.001)
        try:
            return self._upstream(method)(request, timeout=timeout, metadata=_metadata(context))
        except grpc.RpcError as exc:
            context.abort(exc.code(), exc.details() or "")
            raise  # not reached

    def _answer(
        self, method: str, request: bytes, context: grpc.ServicerContext, watchers: list[Calls]
    ) -> bytes:
        name = method.removeprefix(_SUB)
        knobs = self.knobs
        if name == "Pull":
            return self._pull(method, request, context, watchers)
        if name == "Acknowledge" and knobs.lost_acks:
            ack = _ACK.FromString(request)
            kept = [i for i in ack.ack_ids if self._random.random() >= knobs.lost_acks]
            if not kept:
                return b""
            del ack.ack_ids[:]
            ack.ack_ids.extend(kept)
            request = ack.SerializeToString()
        if name == "ModifyAckDeadline" and knobs.cap:
            seconds = _MODIFY.FromString(request).ack_deadline_seconds
            if seconds > MAX_ACK_DEADLINE:
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Invalid ack deadline given: {seconds}; the maximum is {MAX_ACK_DEADLINE}",
                )
        if name == "CreateSubscription":
            sub = _SUBSCRIPTION.FromString(request)
            self._check_deadline(sub.ack_deadline_seconds, context)
            answer = self._forward(method, request, context)
            with self._lock:
                self._filters[sub.name] = parse_filter(sub.filter)
            return answer
        if name == "UpdateSubscription":
            update = _UPDATE.FromString(request)
            if "ack_deadline_seconds" in update.update_mask.paths:
                self._check_deadline(update.subscription.ack_deadline_seconds, context)
        if name == "DeleteSubscription":
            with self._lock:
                self._filters.pop(_DELETE.FromString(request).subscription, None)
        return self._forward(method, request, context)

    def _check_deadline(self, seconds: int, context: grpc.ServicerContext) -> None:
        if self.knobs.cap and seconds > MAX_ACK_DEADLINE:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Invalid ackDeadlineSeconds: {seconds}; must be between 10 and {MAX_ACK_DEADLINE}",
            )

    def _filter_of(self, subscription: str) -> Predicate:
        with self._lock:
            known = self._filters.get(subscription)
        if known is not None:
            return known
        try:
            answer = self._upstream(_SUB + "GetSubscription")(
                _GET(subscription=subscription).SerializeToString(), timeout=10
            )
            predicate = parse_filter(_SUBSCRIPTION.FromString(answer).filter)
        except grpc.RpcError:
            return lambda _attrs: True  # let the pull itself report a missing subscription
        with self._lock:
            self._filters[subscription] = predicate
        return predicate

    def _pull(
        self, method: str, request: bytes, context: grpc.ServicerContext, watchers: list[Calls]
    ) -> bytes:
        knobs = self.knobs
        pull = _PULL.FromString(request)
        predicate = self._filter_of(pull.subscription) if knobs.filters else None
        if pull.return_immediately and knobs.blind_glances:
            with self._lock:
                blind = self._random.random() < knobs.blind_glances
            if blind:
                return _PULL_RESPONSE().SerializeToString()  # type: ignore[no-any-return]
        if knobs.partial and pull.max_messages > 1:
            # Asked for fewer (a random share), rather than pulled and handed back: a message
            # handed back counts a delivery attempt on the emulator, which the service would not.
            pull.max_messages = self._random.randint(1, pull.max_messages)
        held = False
        while True:
            messages = self._pulled(method, pull, context, predicate, whole=knobs.partial)
            if messages or not knobs.hold_empty or pull.return_immediately:
                if messages and knobs.slow_answers and knobs.slow_only in pull.subscription:
                    time.sleep(knobs.slow_answers)
                answer = _PULL_RESPONSE()
                answer.received_messages.extend(messages)
                return answer.SerializeToString()  # type: ignore[no-any-return]
            if not held:
                held = True
                with self._lock:
                    for watcher in watchers:
                        watcher._held += 1
            remaining = context.time_remaining()
            if not context.is_active() or (remaining is not None and remaining <= 2 * _POLL):
                # Held to the deadline: DEADLINE_EXCEEDED, sent a moment before it (at the
                # deadline itself gRPC's own cancel can reach the client first, as CANCELLED).
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
            time.sleep(_POLL)

    def _screened(
        self, subscription: str, messages: list[Any], predicate: Predicate | None
    ) -> list[Any]:
        """The messages the subscription's filter accepts; the rejected acknowledged."""
        if predicate is None:
            return messages
        rejected = [m for m in messages if not predicate(dict(m.message.attributes))]
        if rejected:
            self._settle(subscription, [m.ack_id for m in rejected], None)
        return [m for m in messages if predicate(dict(m.message.attributes))]

    def _pulled(
        self,
        method: str,
        pull: Any,
        context: grpc.ServicerContext,
        predicate: Predicate | None,
        *,
        whole: bool,
    ) -> list[Any]:
        """What the emulator hands out for `pull`, those the filter rejects acknowledged. With
        `whole`, up to all that was asked: further pulls of the emulator while each answer comes
        back full (the service answers up to 1000 messages in one pull; the emulator at most
        EMULATOR_PULL_MOST)."""
        messages: list[Any] = []
        left = pull.max_messages
        while True:
            ask = _PULL()
            ask.CopyFrom(pull)
            ask.max_messages = left
            answer = _PULL_RESPONSE.FromString(
                self._forward(method, ask.SerializeToString(), context)
            )
            got = list(answer.received_messages)
            messages += self._screened(pull.subscription, got, predicate)
            left -= len(got)
            if not whole or left <= 0 or len(got) < EMULATOR_PULL_MOST:
                return messages

    def _settle(self, subscription: str, ack_ids: list[str], seconds: int | None) -> None:
        """Ack (None) or set the deadline of ids behind the client's back (not counted)."""
        if seconds is None:
            self._upstream(_SUB + "Acknowledge")(
                _ACK(subscription=subscription, ack_ids=ack_ids).SerializeToString(), timeout=10
            )
        else:
            self._upstream(_SUB + "ModifyAckDeadline")(
                _MODIFY(
                    subscription=subscription, ack_ids=ack_ids, ack_deadline_seconds=seconds
                ).SerializeToString(),
                timeout=10,
            )

    def stream(self, method: str, requests: Iterator[bytes], context: grpc.ServicerContext) -> Any:
        """StreamingPull passes through untouched but for the round trip's delay on each answer."""
        start = time.monotonic()
        watchers = self._watching()
        remaining = context.time_remaining()
        call = self._channel.stream_stream(method)(
            requests, timeout=remaining, metadata=_metadata(context)
        )
        context.add_callback(call.cancel)
        try:
            for answer in call:
                if self.knobs.rtt:
                    time.sleep(self.knobs.rtt)
                yield answer
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                context.abort(exc.code(), exc.details() or "")
        finally:
            self._record(method, start, watchers)


def _metadata(context: grpc.ServicerContext) -> list[tuple[str, str]]:
    return [
        (k, v)
        for k, v in context.invocation_metadata()
        if not k.startswith(":") and k not in ("user-agent", "grpc-timeout")
    ]


class _Handler(grpc.GenericRpcHandler):  # type: ignore[misc]
    def __init__(self, layer: RealisticPubSub) -> None:
        self._layer = layer

    def service(self, details: Any) -> Any:
        method: str = details.method
        layer = self._layer
        if method in _STREAMING:
            return grpc.stream_stream_rpc_method_handler(
                lambda requests, context: layer.stream(method, requests, context)
            )
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: layer.unary(method, request, context)
        )


_shared: dict[str, RealisticPubSub] = {}


def shared_layer(emulator: str) -> RealisticPubSub:
    """The session's layer in front of `emulator` (knobs as the service, rtt 10 ms unless
    PULLQUEUE_TEST_RTT_MS says otherwise), started once and stopped at exit."""
    if emulator not in _shared:
        import atexit

        rtt = float(os.environ.get("PULLQUEUE_TEST_RTT_MS", "10")) / 1000
        layer = RealisticPubSub(emulator, Knobs.service(rtt))
        _shared[emulator] = layer
        atexit.register(layer.close)
    return _shared[emulator]
