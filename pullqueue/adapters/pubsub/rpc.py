"""The Pub/Sub calls the adapter makes, each bounded in time and mapped to pullqueue's errors.

One place owns the Google clients (honouring PUBSUB_EMULATOR_HOST exactly as they do), retries
only what is safe to retry, and turns exactly-once per-ack-id failures into a set of stale ids.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

import grpc  # type: ignore[import-untyped]
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import AnonymousCredentials
from google.protobuf import timestamp_pb2
from google.pubsub_v1 import PublisherClient, SubscriberClient
from google.pubsub_v1.services.subscriber.transports.grpc import SubscriberGrpcTransport
from google.pubsub_v1.types import pubsub as pubsub_types

from pullqueue.adapters.pubsub.errors import (
    TRANSIENT_ACK_PREFIX,
    exactly_once_failures,
    translate,
)
from pullqueue.errors import ConfigurationError, Error

T = TypeVar("T")

log = logging.getLogger(__name__)

PARALLEL_PULLS = 4
"""Pulls of one subscription one lease call may have in flight at once."""
PULL_THREADS = 64
"""Threads for pulls side by side: one per subscription of a queue when probing its heads."""
POOL_NAME = "pullqueue-pubsub-pull"
"""The pool threads' name prefix."""
ACK_IDS_PER_REQUEST = 1000
"""Ack ids per acknowledge/modifyAckDeadline request (well under the 512 KiB request limit)."""
MAX_ACK_DEADLINE = 600
"""Pub/Sub's longest ack deadline, in seconds."""
UNLIMITED = -1
"""gRPC's 'no limit' for a channel's message sizes (what the Google clients set for Pub/Sub)."""
ANSWER_RATE = 8 * 2**20
"""Bytes a second a pull's answer is given to arrive in: the deadline sent is the longer of the
pull's wait and the expected answer's bytes at this rate (within ANSWER_TIME).

A server hands messages out the moment it answers a pull; an answer still in transfer when the
client's deadline passes is dropped, and its messages stay hidden until their ack deadline
(late, never lost). A deadline of the wait alone (0.25 s for a lease's next pulls) gave a
16 MiB answer of 1 MB payloads a quarter of a second to arrive. But Pub/Sub holds a pull of an
empty subscription until the client's deadline (it answers DEADLINE_EXCEEDED then, which is an
empty answer here), so every second added is a second more on each pull that finds nothing: the
deadline grows with the answer's expected size rather than by a fixed floor, and a pull of small
messages keeps its wait as deadline.
"""
HELD_EMPTY_SHARE = 0.8
"""An empty answer after this share of the pull's wait was held by the server (Pub/Sub)."""
HELD_EMPTY_LEAST = 0.5
"""Seconds of wait below which an empty answer says nothing of holding: a loaded emulator can
answer [] in a tenth of a second, never near a whole pull wait."""
ANSWERED_DEADLINE = 1.0
"""Least seconds of deadline a pull is sent with where the last pull that found nothing was
answered at once (the emulator): an answer dropped at its deadline costs its messages their ack
deadline (60 s) hidden. A loaded machine answered pulls of a drained shard (a short wait of
0.15-0.25 s) late, and four worker processes left 64 tasks of one shard unleased for 20 s;
through a layer answering such pulls 0.7 s late, leases by tag leased 0 of 30 tasks in 20 s.
No more: the emulator holds an empty pull until about a second before its deadline (measured:
answered at once up to a 1.0 s deadline, after 0.56 s at 1.5 s, 1.56 s at 2.5 s, 4.04 s at 5 s)."""
EMULATED_DEADLINE = 10.0
"""Seconds of deadline a pull is sent with on the emulator once it answered empty pulls at once:
asked not to hold an empty pull (`return_immediately`, which the emulator honours at any deadline:
answered in 8-16 ms at 1, 2.5 and 10 s), it answers at once when nothing waits, and a late answer
bringing messages (a loaded machine) is received within this long rather than dropped at
ANSWERED_DEADLINE with its messages hidden for their ack deadline (CI: six worker processes
stopping at their first empty lease left 1,131 of 3,000 tasks behind; through the realistic layer
answering 1.2 s late, all 3,000)."""
LATE_SHARE = 0.5
"""Share of the time the first useful answer took that the other calls of a round get after it."""
LATE_LEAST = 0.02
"""Least seconds the other calls of a round get after the first useful answer."""
ANSWER_TIME = (0.05, 1.0)
"""Least and most seconds a pull's answer is given to arrive in."""


# The client warns on every pull with return_immediately; pullqueue sets it on purpose, for one
# kind of pull (a glance, PullRounds._glance_at), and says so in docs/pubsub.md.
warnings.filterwarnings(
    "ignore",
    message="The return_immediately flag is deprecated",
    category=DeprecationWarning,
    module="google.pubsub_v1",
)


def answer_time(answer_bytes: int) -> float:
    """Seconds an answer of about answer_bytes is given to arrive in."""
    low, high = ANSWER_TIME
    return min(max(answer_bytes / ANSWER_RATE, low), high)


TOO_LARGE = "larger than max"
"""In gRPC's RESOURCE_EXHAUSTED message when an answer is over the channel's receive limit."""

_MODIFY_PB = pubsub_types.ModifyAckDeadlineRequest.pb()
_ACK_PB = pubsub_types.AcknowledgeRequest.pb()
# Requests are built as raw protobufs and wrapped, not marshalled field by field: a thousand
# ack ids cost one C-level copy instead of a thousand Python conversions.

_RETRIABLE = (gexc.ServiceUnavailable,)
"""Retried inside a call: the connection failed, so the request did not take effect."""


class Pending:
    """The result of a call still running (see PubSubRpc.run_until_useful)."""


PENDING = Pending()


def _outcome(future: Future[Any]) -> Any:
    """A finished call's result, or the Error it raised (other exceptions propagate)."""
    failure = future.exception()
    if isinstance(failure, Error):
        return failure
    return future.result()


def emulator_host() -> str | None:
    """The emulator the Google clients will use (PUBSUB_EMULATOR_HOST), or None."""
    return os.environ.get("PUBSUB_EMULATOR_HOST") or None


class PubSubRpc:
    """Publisher and subscriber clients for one project, with bounded, error-mapped calls."""

    def __init__(self, project: str, timeout: float, *, max_receive: int = UNLIMITED) -> None:
        self.project = project
        self.timeout = timeout
        # The Google clients read PUBSUB_EMULATOR_HOST themselves (an insecure channel to it);
        # like google.cloud.pubsub_v1's clients, ask for no credentials then.
        host = emulator_host()
        credentials = AnonymousCredentials() if host else None  # type: ignore[no-untyped-call]
        try:
            self.publisher = PublisherClient(credentials=credentials)
            if host:
                # The client's own emulator channel keeps gRPC's 4 MiB receive limit, which a
                # pull of 100 tasks of 100 KB is over (on Pub/Sub it sets no limit): the same
                # channel, without it.
                channel = grpc.insecure_channel(
                    host,
                    options=[
                        ("grpc.max_receive_message_length", max_receive),
                        ("grpc.max_send_message_length", UNLIMITED),
                    ],
                )
                self.subscriber = SubscriberClient(
                    transport=SubscriberGrpcTransport(channel=channel)
                )
            else:
                self.subscriber = SubscriberClient(credentials=credentials)
        except auth_exceptions.DefaultCredentialsError as exc:
            raise ConfigurationError(
                f"pubsub://{project} found no Google credentials; provide Application Default"
                " Credentials with `gcloud auth application-default login`, set"
                " GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, run on GCP with a"
                " service account, or set PUBSUB_EMULATOR_HOST to use the emulator"
            ) from exc
        self._pull_caps: dict[str, int] = {}
        """Subscription -> most messages a pull asks for, after an answer over the receive limit."""
        self._answer_seconds: float | None = None
        self.holds_empty_pulls: bool | None = None if host else True
        """True when the last pull that found nothing was held to its deadline (Pub/Sub), False
        when it was answered empty (the emulator). Before any pull found nothing: True on
        Pub/Sub itself, which holds an empty pull until a message comes or near its deadline
        (a process's first leases then pull as its later ones do, rather than wait for every
        pull of their round), None on an emulator host (the emulator answers at once; a layer
        in front of it may hold)."""
        self.emulated = host is not None
        """The clients talk to PUBSUB_EMULATOR_HOST (never Pub/Sub itself)."""
        self._executor: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def topic_path(self, topic_id: str) -> str:
        return f"projects/{self.project}/topics/{topic_id}"

    def subscription_path(self, subscription_id: str) -> str:
        return f"projects/{self.project}/subscriptions/{subscription_id}"

    def call(
        self,
        fn: Callable[[float], T],
        *,
        queue: str,
        resource: str,
        budget: float | None = None,
        attempt_timeout: float | None = None,
    ) -> T:
        """fn(timeout) retried on UNAVAILABLE within budget seconds; failures become Errors."""
        end = time.monotonic() + (self.timeout if budget is None else budget)
        delay = 0.05
        while True:
            remaining = max(end - time.monotonic(), 0.05)
            try:
                return fn(min(remaining, attempt_timeout or remaining))
            except _RETRIABLE as exc:
                if time.monotonic() + delay >= end:
                    raise translate(exc, queue=queue, resource=resource) from exc
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
            except (gexc.GoogleAPIError, gexc.RetryError) as exc:
                raise translate(exc, queue=queue, resource=resource) from exc

    def publish(self, topic: str, messages: Sequence[object], *, queue: str) -> list[str]:
        """Publish raw PubsubMessage protobufs in one request; their message ids."""
        request = pubsub_types.PublishRequest.wrap(
            pubsub_types.PublishRequest.pb()(topic=topic, messages=messages)
        )

        def send(timeout: float) -> list[str]:
            response = self.publisher.publish(request=request, retry=None, timeout=timeout)
            return list(pubsub_types.PublishResponse.pb(response).message_ids)

        return self.call(send, queue=queue, resource=topic)

    def pull(
        self,
        subscription: str,
        max_messages: int,
        *,
        queue: str,
        wait: float,
        budget: float,
        message_bytes: int = 0,
        grace: float = 0.0,
        immediately: bool = False,
    ) -> list[Any]:
        """Up to max_messages ReceivedMessage protobufs, waiting up to `wait` s for the first
        (`grace` s more are added to the deadline sent, not to the wait held empty pulls are
        judged by). `immediately` asks the server not to hold the pull when nothing waits
        (`return_immediately`, which Pub/Sub deprecates for polling: such a pull may miss a
        message just published; see PullRounds._glance_at, a glance, its one kind of use).

        The deadline sent is the longer of `wait` and the time an answer of max_messages
        messages of message_bytes each takes to arrive (answer_time; the budget grows to allow
        it), so an answer the server sends at once is received rather than dropped in transfer
        (one sent at the end of a wait, for a message published meanwhile, can still be late).
        Where empty pulls are answered at once, at least ANSWERED_DEADLINE: waiting costs
        nothing there, and a loaded server's late answer is received, not dropped. On the
        emulator (PUBSUB_EMULATOR_HOST) once so, the pull is sent with `return_immediately` and
        EMULATED_DEADLINE (`at_once`): the emulator holds an empty pull to about a second before
        its deadline unless asked not to, and an answer later than a second (a loaded machine)
        is still received. Such a pull says nothing of holding (it was asked not to be held).
        Until a pull has told (`holds_empty_pulls` None, an emulator host only), a pull is sent
        so too, and only when it finds nothing is it asked again as Pub/Sub's pulls are (held
        up to its wait, with its wait and grace as deadline): that second pull is what a layer
        in front of the emulator that answers `return_immediately` pulls empty though messages
        wait (as the service may) brings them to, and it tells whether the server holds empty
        pulls (the emulator answers at once, such a layer may hold), on a subscription just
        found empty, so its cut-off hides no task already waiting.
        A process's first pulls bringing tasks then never go with a short deadline: on a loaded
        host their answers came after it, and their tasks stayed hidden for their ack deadline.
        A pull that finds nothing in time is an empty answer, not an error (the emulator
        answers [] before the deadline; Pub/Sub lets it pass, which is answered [] too). An
        answer over the channel's receive limit is asked again for half as many messages (down
        to one), and the subscription's pulls ask for at most that many from then on, so one
        oversized answer never stalls a subscription; the refused answer's messages come back
        when their ack deadline ends.
        """

        def one(immediately: bool, at_once: bool) -> list[Any]:
            """One pull: `at_once` sends it with `return_immediately` and at least
            EMULATED_DEADLINE, and its answer says nothing of holding."""

            def pull(timeout: float) -> list[Any]:
                began = time.monotonic()
                while True:
                    size = min(max_messages, self._pull_caps.get(subscription, max_messages))
                    request = pubsub_types.PullRequest.wrap(
                        pubsub_types.PullRequest.pb()(
                            subscription=subscription,
                            max_messages=size,
                            return_immediately=immediately or at_once,
                        )
                    )
                    try:
                        response = self.subscriber.pull(
                            request=request, retry=None, timeout=timeout
                        )
                    except (gexc.DeadlineExceeded, gexc.Cancelled):
                        # A held pull ended at its deadline; the stack may report the server's
                        # reset as CANCELLED when it arrives before the client's own timer
                        # fires. (One asked not to be held came late: a loaded emulator, not a
                        # holding one.)
                        if not at_once:
                            self.holds_empty_pulls = True
                        return []
                    except gexc.ResourceExhausted as exc:
                        if TOO_LARGE not in str(exc) or size == 1:
                            raise
                        self._pull_caps[subscription] = max(size // 2, 1)
                        continue
                    received = list(pubsub_types.PullResponse.pb(response).received_messages)
                    took = time.monotonic() - began
                    if received:
                        self._answered(took)
                    else:
                        # An empty answer sent near the deadline was held too (a server may answer
                        # [] just before the client's timer fires rather than let it pass).
                        if wait >= HELD_EMPTY_LEAST and not (immediately or at_once):
                            self.holds_empty_pulls = took >= HELD_EMPTY_SHARE * min(wait, timeout)
                    return received

            deadline = max(wait + grace, answer_time(max_messages * message_bytes))
            if at_once:
                deadline = max(deadline, EMULATED_DEADLINE)
            elif self.holds_empty_pulls is False:
                deadline = max(deadline, ANSWERED_DEADLINE)
            return self.call(
                pull,
                queue=queue,
                resource=subscription,
                budget=max(budget, deadline),
                attempt_timeout=deadline,
            )

        # Until a pull tells whether the server holds empty pulls, an emulator host is asked as
        # the emulator is, and a pull that finds nothing asked once more as Pub/Sub is.
        unknown = self.emulated and self.holds_empty_pulls is None
        got = one(immediately, at_once=self.emulated and self.holds_empty_pulls is not True)
        if got or not unknown or immediately:
            return got
        if self.holds_empty_pulls is not None:  # another pull told meanwhile
            return got
        return one(False, at_once=False)

    def _answered(self, seconds: float) -> None:
        with self._pool_lock:
            last = self._answer_seconds
            self._answer_seconds = seconds if last is None else 0.8 * last + 0.2 * seconds

    @property
    def answer_seconds(self) -> float | None:
        """How long a pull that brought messages took, lately (a moving average); None before
        the first: about a round trip on Pub/Sub, a millisecond on the emulator."""
        return self._answer_seconds

    def pull_many(
        self,
        subscription: str,
        sizes: Sequence[int],
        *,
        queue: str,
        wait: float,
        budget: float,
        message_bytes: int = 0,
        grace: float = 0.0,
        immediately: bool = False,
        settle: float | None = None,
        until: float | None = None,
        late: Callable[[list[Any] | None], None] | None = None,
        pending_hook: Callable[[int], None] | None = None,
    ) -> tuple[list[list[Any]], Error | None]:
        """Several pulls at once (one per size): what each brought, and the first failure.

        Pulls run side by side so one lease call is not a queue of round trips (the emulator
        answers at most 100 messages a pull); what the others brought is returned even when
        one fails, so the caller can keep it before raising.

        With `settle` (where empty pulls are held) the pulls still running `settle` seconds
        after one brought messages are not waited for: where messages wait a pull answers in a
        round trip, so those are held empty, and the round would wait for the slowest. They
        count as having brought nothing; `pending_hook` is told how many were left running
        (before this returns), and `late` gets what each brings when it ends (None when it
        failed: the failure is logged, a failed pull brought nothing).
        With `until`, no pull is waited for longer than that many seconds (pulls sent with a
        grace beyond their wait: one held empty is left running, its answer to `late`).
        """
        if len(sizes) == 1:
            answer = self.pull(
                subscription,
                sizes[0],
                queue=queue,
                wait=wait,
                budget=budget,
                message_bytes=message_bytes,
                grace=grace,
                immediately=immediately,
            )
            return [answer], None
        futures = [
            self._pool().submit(
                self.pull,
                subscription,
                size,
                queue=queue,
                wait=wait,
                budget=budget,
                message_bytes=message_bytes,
                grace=grace,
                immediately=immediately,
            )
            for size in sizes
        ]
        if (settle is not None or until is not None) and late is not None:
            return self._settled(futures, settle, until, late, pending_hook)
        results: list[list[Any]] = []
        failure: Error | None = None
        for future in futures:
            try:
                results.append(future.result())
            except Error as exc:
                failure = failure or exc
        return results, failure

    @staticmethod
    def _settled(
        futures: list[Future[list[Any]]],
        settle: float | None,
        until: float | None,
        late: Callable[[list[Any] | None], None],
        pending_hook: Callable[[int], None] | None,
    ) -> tuple[list[list[Any]], Error | None]:
        """pull_many's answers with `settle` or `until` (see there)."""
        results: list[list[Any]] = [[] for _ in futures]
        failure: Error | None = None
        pending = set(range(len(futures)))
        first: float | None = None
        cap = None if until is None else time.monotonic() + until
        while pending:
            ends = [] if cap is None else [cap]
            if first is not None and settle is not None:
                ends.append(first + settle)
            timeout = max(min(ends) - time.monotonic(), 0.0) if ends else None
            done, _ = wait(
                [futures[i] for i in pending], timeout=timeout, return_when=FIRST_COMPLETED
            )
            if not done:
                break
            for i in sorted(pending):
                if not futures[i].done():
                    continue
                pending.discard(i)
                try:
                    results[i] = futures[i].result()
                except Error as exc:
                    failure = failure or exc
                if results[i] and first is None:
                    first = time.monotonic()
        if pending and pending_hook is not None:
            pending_hook(len(pending))

        def ended(future: Future[list[Any]]) -> None:
            error = future.exception()
            if error is not None:
                log.info("a pull left running past its round failed (%s)", error)
            late(None if error is not None else future.result())

        for i in sorted(pending):
            futures[i].add_done_callback(ended)
        return results, failure

    def run_each(self, calls: Sequence[Callable[[], T]]) -> list[T | Error]:
        """Run the calls side by side (pulls of different subscriptions); each one's result, or
        the Error it raised (one call runs in the calling thread; so do all, one after another,
        when the calling thread is one of the pool's: it does not wait on the pool it runs in)."""
        if len(calls) == 1 or threading.current_thread().name.startswith(POOL_NAME):
            results: list[T | Error] = []
            for call in calls:
                try:
                    results.append(call())
                except Error as exc:
                    results.append(exc)
            return results
        futures = [self._pool().submit(call) for call in calls]
        results = []
        for future in futures:
            try:
                results.append(future.result())
            except Error as exc:
                results.append(exc)
        return results

    def run_until_useful(
        self,
        calls: Sequence[Callable[[], T]],
        useful: Callable[[T], bool],
        late: Callable[[int, Any], None],
        *,
        give_up: float | None = None,
        pending_hook: Callable[[int], None] | None = None,
    ) -> list[T | Error | Pending]:
        """Run the calls side by side until one's result is `useful`; then wait for the others
        no longer than that one took (LATE_SHARE of it, at least LATE_LEAST s). Each one's
        result or Error, PENDING for a call still running then: `late(index, outcome)` gets it
        when it ends. With `give_up`, no call is waited for longer than that many seconds when
        none was useful by then. `pending_hook(index)` is told of each call left running
        before its `late` can be.

        On Pub/Sub an empty pull is held until its deadline: a lease that has tasks to answer
        with does not wait for the pulls of empty subscriptions beside them.
        """
        if len(calls) == 1 and give_up is None:
            return list(self.run_each(calls))
        began = time.monotonic()
        futures = [self._pool().submit(call) for call in calls]
        index = {future: i for i, future in enumerate(futures)}
        pending = set(futures)
        until: float | None = None if give_up is None else began + give_up
        answered = False
        while pending:
            timeout = None if until is None else max(until - time.monotonic(), 0.0)
            done, pending = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
            if not done:
                break
            if not answered and any(
                future.exception() is None and useful(future.result()) for future in done
            ):
                answered = True
                took = time.monotonic() - began
                until = time.monotonic() + max(took * LATE_SHARE, LATE_LEAST)
        results: list[T | Error | Pending] = []
        for future in futures:
            if future in pending:
                results.append(PENDING)
                if pending_hook is not None:
                    pending_hook(index[future])
                future.add_done_callback(lambda f: late(index[f], _outcome(f)))
            else:
                results.append(_outcome(future))
        return results

    def start(self, call: Callable[[], T]) -> Future[T]:
        """Run the call in the background (beside the calling thread's own calls)."""
        return self._pool().submit(call)

    def _pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=PULL_THREADS, thread_name_prefix=POOL_NAME
                )
            return self._executor

    def modify(
        self, subscription: str, ack_ids: Iterable[str], seconds: int, *, queue: str
    ) -> set[str]:
        """Set the ack deadline of ack_ids to seconds (0..600); the ids that are no longer ours."""

        def send(ids: list[str], timeout: float) -> None:
            request = _MODIFY_PB(
                subscription=subscription, ack_ids=ids, ack_deadline_seconds=seconds
            )
            self.subscriber.modify_ack_deadline(
                request=pubsub_types.ModifyAckDeadlineRequest.wrap(request),
                retry=None,
                timeout=timeout,
            )

        return self._settle(subscription, list(ack_ids), send, queue=queue)

    def ack(self, subscription: str, ack_ids: Iterable[str], *, queue: str) -> set[str]:
        """Acknowledge ack_ids; the ids Pub/Sub refused (their lease had ended)."""

        def send(ids: list[str], timeout: float) -> None:
            self.subscriber.acknowledge(
                request=pubsub_types.AcknowledgeRequest.wrap(
                    _ACK_PB(subscription=subscription, ack_ids=ids)
                ),
                retry=None,
                timeout=timeout,
            )

        return self._settle(subscription, list(ack_ids), send, queue=queue)

    def _settle(
        self,
        subscription: str,
        ack_ids: list[str],
        send: Callable[[list[str], float], None],
        *,
        queue: str,
    ) -> set[str]:
        """Send ack ids in chunks; retry transient per-id failures; return the permanent ones."""
        stale: set[str] = set()
        end = time.monotonic() + self.timeout
        for start in range(0, len(ack_ids), ACK_IDS_PER_REQUEST):
            pending = ack_ids[start : start + ACK_IDS_PER_REQUEST]
            delay = 0.05
            while pending:

                def attempt(timeout: float, ids: list[str] = pending) -> Mapping[str, str]:
                    try:
                        send(ids, timeout)
                    except gexc.InvalidArgument as exc:
                        failures = exactly_once_failures(exc)
                        if failures is None:
                            raise
                        return failures
                    return {}

                failures = self.call(
                    attempt,
                    queue=queue,
                    resource=subscription,
                    budget=max(end - time.monotonic(), 0.05),
                )
                retry = [i for i in pending if failures.get(i, "").startswith(TRANSIENT_ACK_PREFIX)]
                stale.update(i for i in pending if i in failures and i not in retry)
                if retry and time.monotonic() + delay >= end:
                    stale.update(retry)
                    retry = []
                if retry:
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                pending = retry
        return stale

    def seek(self, subscription: str, when: float, *, queue: str) -> None:
        """Mark every message published before `when` (POSIX seconds) acknowledged."""
        stamp = timestamp_pb2.Timestamp()
        stamp.FromNanoseconds(int(when * 1e9))
        self.call(
            lambda timeout: self.subscriber.seek(
                request={"subscription": subscription, "time": stamp},
                retry=None,
                timeout=timeout,
            ),
            queue=queue,
            resource=subscription,
        )

    def finish_pulls(self) -> None:
        """Wait for the calls running in the pull threads to end (the threads stop)."""
        with self._pool_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        # Calls made after (the backend's close gives held tasks back side by side) start a
        # new pool, which close() shuts down.

    def close(self) -> None:
        """Stop the pull threads and close both clients' channels."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self.publisher.transport.close()  # type: ignore[no-untyped-call]
        self.subscriber.transport.close()  # type: ignore[no-untyped-call]
