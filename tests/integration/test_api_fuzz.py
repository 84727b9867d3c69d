"""Property-based fuzzing of the served ``/v1/openapi.json`` with schemathesis.

Every operation (the WebSocket aside) gets valid and invalid requests made from the
document itself, sent with a valid key; every response must be no 5xx and must conform
to the document: status code, content type, headers (``x-request-id``, ``Retry-After``,
``Location``) and body schema, and requests the document calls invalid must be refused.
Examples per operation are bounded so the module runs in about a minute or two; jobs the
fuzzer creates point at nothing reachable and fail at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis import checks as st_checks

from gateway.openapi import openapi_document

from ops.stack import Stack

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

EXAMPLES = 200
CHECKS = [st_checks.not_a_server_error, st_checks.status_code_conformance,
          st_checks.content_type_conformance, st_checks.response_headers_conformance,
          st_checks.response_schema_conformance, st_checks.negative_data_rejection]
OPERATIONS = [(method.upper(), path) for path, item in openapi_document()["paths"].items()
              for method in item if not item[method].get("x-websocket")]
CALLS: Counter[str] = Counter()
STATUSES: Counter[int] = Counter()


@pytest.fixture(scope="module", autouse=True)
def no_uncaught_errors(stack: Stack) -> Iterator[None]:
    with stack.no_uncaught_errors():
        yield


@pytest.fixture(scope="module")
def fuzz_key(stack: Stack) -> str:
    return stack.new_account(max_requests_per_minute=100_000)[1]


@pytest.fixture(scope="module")
def served(stack: Stack) -> Iterator[schemathesis.BaseSchema]:
    """The document as the running gateway serves it."""
    schema = schemathesis.openapi.from_url(stack.url("/v1/openapi.json"))
    # The key is ours to send on every request; missing and bad keys are the contract
    # suite's (test_every_endpoint_needs_a_key), so the fuzzer does not drop or mangle it.
    schema.config.generation.update(with_security_parameters=False)
    yield schema
    print(f"\nfuzz: {len(CALLS)} operations, {sum(CALLS.values())} requests: "
          + ", ".join(f"{k} {v}" for k, v in sorted(CALLS.items()))
          + "\nfuzz statuses: " + ", ".join(f"{k}: {v}" for k, v in sorted(STATUSES.items())))


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_api_conforms_to_its_document(served: schemathesis.BaseSchema, fuzz_key: str,
                                      method: str, path: str) -> None:
    operation = served[path][method]
    cases = st.one_of(operation.as_strategy(GenerationMode.POSITIVE),
                      operation.as_strategy(GenerationMode.NEGATIVE))

    @given(case=cases)
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    def check(case: schemathesis.Case) -> None:
        CALLS[f"{method} {path}"] += 1
        resp = case.call_and_validate(headers={"Authorization": f"Bearer {fuzz_key}"},
                                      checks=CHECKS, timeout=30)
        STATUSES[resp.status_code] += 1
        if resp.status_code >= 400:  # every error: the envelope and its request id, Allow on 405
            err = resp.json()["error"]
            headers = {k.lower(): v[0] for k, v in resp.headers.items()}
            assert err["request_id"] == headers["x-request-id"] or (
                resp.status_code in (502, 504) and err["request_id"] is None), err
            assert resp.status_code != 405 or headers.get("allow"), headers

    check()
