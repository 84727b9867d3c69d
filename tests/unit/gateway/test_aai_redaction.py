"""``/v2``'s PII redaction options: what the SDK sends becomes the job's ``PiiRedaction``;
what a5s cannot redact is refused in AssemblyAI's error shape with the reason."""

from __future__ import annotations

import json

import assemblyai as aai
import pytest

from gateway.assemblyai_compat import OPTIONS_KEY, aai_transcript, create_body, pii_redaction
from schemas.api import Transcript
from schemas.assemblyai import PII_POLICIES_REFUSED, AaiCreateTranscript
from schemas.errors import InvalidRequest
from schemas.records import PiiRedaction

HOSTS = {"a5s.example:8080"}


def _sdk(**redact: object) -> AaiCreateTranscript:
    config = aai.TranscriptionConfig().set_redact_pii(**redact)  # type: ignore[arg-type]
    sent = aai.types.TranscriptRequest(audio_url="https://cdn.example/a.wav",
                                       **config.raw.dict(exclude_none=True))
    return AaiCreateTranscript.model_validate(sent.dict(exclude_none=True, by_alias=True))


def test_the_sdks_redaction_options_become_the_jobs() -> None:
    req = _sdk(policies=[aai.PIIRedactionPolicy.credit_card_number,
                         aai.PIIRedactionPolicy.email_address],
               substitution=aai.PIISubstitutionPolicy.entity_name, redact_audio=True,
               redact_audio_quality=aai.types.PIIRedactedAudioQuality.wav,
               redact_audio_options={"override_audio_redaction_method": "silence"})
    assert pii_redaction(req) == PiiRedaction(
        policies=["credit_card_number", "email_address"], substitution="entity_name",
        audio=True, audio_method="silence", audio_format="wav")
    options = create_body(req, HOSTS)["metadata"][OPTIONS_KEY]
    assert options["redact_pii_policies"] == ["credit_card_number", "email_address"]
    assert options["redact_pii_audio_quality"] == "wav"
    # AssemblyAI's defaults: hash, beep, mp3
    assert pii_redaction(_sdk(policies=[aai.PIIRedactionPolicy.phone_number])) == PiiRedaction(
        policies=["phone_number"])


def test_the_transcript_says_what_was_redacted_and_the_sdk_reads_it() -> None:
    t = Transcript(id="tr_1", status="completed", created_at="2026-01-02T03:04:05Z",
                   metadata={OPTIONS_KEY: {"redact_pii": True, "redact_pii_audio": True,
                                           "redact_pii_policies": ["phone_number"],
                                           "redact_pii_sub": "hash",
                                           "redact_pii_audio_quality": "mp3"}},
                   text="call ### #### ####", words=[])
    parsed = aai.types.TranscriptResponse.parse_obj(
        json.loads(aai_transcript(t, "http://a5s.example:8080").model_dump_json()))
    assert parsed.redact_pii and parsed.redact_pii_audio
    assert parsed.redact_pii_policies == [aai.PIIRedactionPolicy.phone_number]


@pytest.mark.parametrize("name", sorted(PII_POLICIES_REFUSED))
def test_every_refused_policy_says_why(name: str) -> None:
    with pytest.raises(InvalidRequest) as exc:
        create_body(AaiCreateTranscript(audio_url="https://cdn.example/a.wav", redact_pii=True,
                                        redact_pii_policies=["phone_number", name]), HOSTS)
    assert exc.value.param == "redact_pii_policies"
    assert PII_POLICIES_REFUSED[name] in exc.value.message and name in exc.value.message


@pytest.mark.parametrize("fields,param,message", [
    ({"redact_pii_policies": ["shoe_size"]}, "redact_pii_policies", "Unknown PII policy"),
    ({"redact_pii_policies": []}, "redact_pii_policies", "at least one policy"),
    ({"redact_pii_policies": ["phone_number"], "redact_pii_sub": "stars"}, "redact_pii_sub",
     "hash or entity_name"),
    ({"redact_pii_policies": ["phone_number"], "redact_pii_audio_quality": "flac"},
     "redact_pii_audio_quality", "mp3 or wav"),
    ({"redact_pii_policies": ["phone_number"],
      "redact_pii_audio_options": {"override_audio_redaction_method": "whistle"}},
     "redact_pii_audio_options", "silence"),
    ({"redact_pii_policies": ["phone_number"], "redact_pii_return_unredacted": True},
     "redact_pii_return_unredacted", "never stores"),
])
def test_bad_redaction_options_are_refused(fields: dict[str, object], param: str,
                                           message: str) -> None:
    with pytest.raises(InvalidRequest, match=message) as exc:
        create_body(AaiCreateTranscript.model_validate(
            {"audio_url": "https://cdn.example/a.wav", "redact_pii": True, **fields}), HOSTS)
    assert exc.value.param == param


def test_redaction_options_without_redact_pii_are_refused() -> None:
    with pytest.raises(InvalidRequest, match="redact_pii_audio needs redact_pii") as exc:
        create_body(AaiCreateTranscript(audio_url="https://cdn.example/a.wav",
                                        redact_pii_audio=True), HOSTS)
    assert exc.value.param == "redact_pii_audio"
    assert pii_redaction(AaiCreateTranscript(audio_url="https://cdn.example/a.wav",
                                             redact_pii=False, redact_pii_policies=[])) is None


def test_redacted_audio_of_a_multichannel_job_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="single-channel") as exc:
        create_body(AaiCreateTranscript(audio_url="https://cdn.example/a.wav", multichannel=True,
                                        redact_pii=True, redact_pii_policies=["phone_number"],
                                        redact_pii_audio=True), HOSTS)
    assert exc.value.param == "redact_pii_audio"
    body = create_body(AaiCreateTranscript(audio_url="https://cdn.example/a.wav",
                                           multichannel=True, redact_pii=True,
                                           redact_pii_policies=["phone_number"]), HOSTS)
    assert body["metadata"][OPTIONS_KEY]["redact_pii"] is True
