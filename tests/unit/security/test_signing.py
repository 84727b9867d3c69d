"""Standard Webhooks signing: known answers, and every way verification must fail."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from security.signing import (WebhookVerificationError, headers, new_secret, sign, sign_upload,
                              upload_signature_matches, upload_url_key, verify)

NOW = 1_700_000_000
BODY = b'{"event":"transcript.completed","id":"tr_1","status":"completed","metadata":{}}'


def _expected(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def test_new_secret_shape() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_")
    assert 24 <= len(base64.b64decode(secret[len("whsec_"):], validate=True)) <= 32
    assert new_secret() != secret


def test_published_vector() -> None:
    # The test vector of the Standard Webhooks reference libraries.
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    got = sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}')
    assert got == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_known_answer_computed_independently() -> None:
    secret = "whsec_" + base64.b64encode(bytes(range(32))).decode()
    assert sign(secret, "msg_abc", NOW, BODY) == _expected(secret, "msg_abc", NOW, BODY)
    # The prefix is optional when signing.
    assert sign(secret.removeprefix("whsec_"), "msg_abc", NOW, BODY) == sign(secret, "msg_abc",
                                                                             NOW, BODY)


def test_headers_round_trip() -> None:
    secret = new_secret()
    sent = headers(secret, "msg_1", BODY, now=NOW)
    assert sent == {"webhook-id": "msg_1", "webhook-timestamp": str(NOW),
                    "webhook-signature": _expected(secret, "msg_1", NOW, BODY),
                    "content-type": "application/json"}
    verify(secret, sent, BODY, now=NOW + 10)
    # Header names are case-insensitive.
    verify(secret, {k.title(): v for k, v in sent.items()}, BODY, now=NOW)


@pytest.mark.parametrize("mutate", [
    pytest.param(lambda s, h, b: (s, h, b + b" "), id="tampered-body"),
    pytest.param(lambda s, h, b: (new_secret(), h, b), id="wrong-secret"),
    pytest.param(lambda s, h, b: (s, {**h, "webhook-id": "msg_2"}, b), id="other-id"),
    pytest.param(lambda s, h, b: (s, {**h, "webhook-timestamp": str(NOW + 1)}, b), id="other-ts"),
    pytest.param(lambda s, h, b: (s, {**h, "webhook-signature": "v1,AAAA"}, b), id="garbage"),
    pytest.param(lambda s, h, b: (s, {**h, "webhook-signature": h["webhook-signature"]
                                      .replace("v1,", "v2,")}, b), id="unknown-version"),
    pytest.param(lambda s, h, b: (s, {k: v for k, v in h.items() if k != "webhook-signature"}, b),
                 id="missing-signature"),
    pytest.param(lambda s, h, b: (s, {k: v for k, v in h.items() if k != "webhook-timestamp"}, b),
                 id="missing-timestamp"),
    pytest.param(lambda s, h, b: (s, {**h, "webhook-timestamp": "17e8"}, b), id="bad-timestamp"),
])
def test_verify_rejects(mutate) -> None:
    secret = new_secret()
    secret2, sent, body = mutate(secret, headers(secret, "msg_1", BODY, now=NOW), BODY)
    with pytest.raises(WebhookVerificationError):
        verify(secret2, sent, body, now=NOW)


@pytest.mark.parametrize(("age", "ok"), [(0, True), (299, True), (300, True), (301, False),
                                         (-300, True), (-301, False), (3600, False)])
def test_timestamp_tolerance(age: int, ok: bool) -> None:
    secret = new_secret()
    sent = headers(secret, "msg_1", BODY, now=NOW)
    if ok:
        verify(secret, sent, BODY, now=NOW + age)
    else:
        with pytest.raises(WebhookVerificationError, match="timestamp"):
            verify(secret, sent, BODY, now=NOW + age)


def test_multiple_signatures_any_match() -> None:
    old, new = new_secret(), new_secret()
    sent = headers(new, "msg_1", BODY, now=NOW)
    both = f"v1a,ignored {sign(old, 'msg_1', NOW, BODY)} {sent['webhook-signature']}"
    verify(new, {**sent, "webhook-signature": both}, BODY, now=NOW)
    verify(old, {**sent, "webhook-signature": both}, BODY, now=NOW)
    with pytest.raises(WebhookVerificationError):
        verify(new_secret(), {**sent, "webhook-signature": both}, BODY, now=NOW)


def test_bad_secret() -> None:
    with pytest.raises(ValueError):
        sign("whsec_not base64!", "msg_1", NOW, BODY)
    with pytest.raises(WebhookVerificationError):
        verify("whsec_not base64!", headers(new_secret(), "msg_1", BODY, now=NOW), BODY, now=NOW)


# --- upload URLs -------------------------------------------------------------------------------

def test_upload_signature_binds_file_and_expiry(tmp_path) -> None:
    key = upload_url_key(tmp_path / "keys" / "upload-url.key")
    assert upload_url_key(tmp_path / "keys" / "upload-url.key") == key   # created once, reread
    assert (tmp_path / "keys" / "upload-url.key").stat().st_mode & 0o777 == 0o600
    signature = sign_upload(key, "file_abc", 1_900_000_000)
    expected = hmac.new(key, b"PUT\n/v1/uploads/file_abc\n1900000000", hashlib.sha256).hexdigest()
    assert signature == expected
    assert upload_signature_matches(key, "file_abc", "1900000000", signature)
    assert not upload_signature_matches(key, "file_abd", "1900000000", signature)
    assert not upload_signature_matches(key, "file_abc", "1900000001", signature)
    assert not upload_signature_matches(key, "file_abc", "-1", signature)
    assert not upload_signature_matches(key, "file_abc", "", signature)
    assert not upload_signature_matches(key, "file_abc", "\u00b2", signature)  # a digit to isdigit()
    assert not upload_signature_matches(b"other" * 8, "file_abc", "1900000000", signature)
