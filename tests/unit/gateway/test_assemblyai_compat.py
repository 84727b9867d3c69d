"""The ``/v2`` shape mappings, driven without a stack, and checked against the SDK's own models."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import assemblyai as aai
import pytest

from gateway.assemblyai_compat import (OPTIONS_KEY, aai_list, aai_transcript, create_body,
                                       job_fields, speaker_letter, unlabelled, upload_file_id,
                                       upload_url)
from gateway.base import parse_body
from pipeline.webhooks import event_body
from schemas.api import CreateTranscript, JobError, Transcript, Utterance, Word
from schemas.assemblyai import REFUSED, AaiCreateTranscript
from schemas.errors import InvalidRequest
from schemas.records import JobSpec, SpeakerCount, TranscriptResult

BASE = "http://a5s.example:8080"
HOSTS = {"a5s.example:8080"}
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _req(**fields: object) -> AaiCreateTranscript:
    return AaiCreateTranscript.model_validate({"audio_url": "https://cdn.example/a.wav", **fields})


def _transcript(labels: bool | None = True, status: str = "completed") -> Transcript:
    words = [Word(text="hello", start=0.5, end=0.9, speaker="speaker_1"),
             Word(text="hi", start=1.2, end=1.4, speaker="speaker_2")]
    return Transcript(
        id="tr_1", status=status, created_at=T0, file_id="file_abc", audio_duration=56.27,
        metadata={OPTIONS_KEY: {"speaker_labels": labels}} if labels is not None else {},
        text="hello hi", words=words,
        utterances=[Utterance(speaker="speaker_1", start=0.5, end=0.9, text="hello",
                              words=words[:1]),
                    Utterance(speaker="speaker_2", start=1.2, end=1.4, text="hi",
                              words=words[1:])],
        error=JobError(code="invalid_audio", message="Not audio.") if status == "error" else None)


def test_speaker_letters() -> None:
    assert [speaker_letter(f"speaker_{n}") for n in (1, 2, 26, 27, 28, 53)] == \
        ["A", "B", "Z", "AA", "AB", "BA"]
    assert speaker_letter("narrator") == "narrator"


def test_the_sdks_request_becomes_a_v1_body() -> None:
    config = aai.TranscriptionConfig(speaker_labels=True, webhook_url="https://h.example/x",
                                     webhook_auth_header_name="X-T",
                                     webhook_auth_header_value="v", language_code="en_uk",
                                     punctuate=False)
    sent = aai.types.TranscriptRequest(audio_url=upload_url(BASE, "file_abc"),
                                       **config.raw.dict(exclude_none=True))
    body = create_body(AaiCreateTranscript.model_validate(
        sent.dict(exclude_none=True, by_alias=True)), HOSTS)
    v1 = CreateTranscript.model_validate(body)
    assert v1.file_id == "file_abc" and v1.audio_url is None and v1.language_code == "en"
    assert v1.webhook_auth_header_value == "v"
    assert v1.metadata[OPTIONS_KEY]["speaker_labels"] is True


def test_urls_of_other_hosts_are_fetched() -> None:
    assert upload_file_id(upload_url(BASE, "file_abc"), {"elsewhere:80"}) is None
    body = create_body(_req(audio_url="http://other.example/v2/upload/file_abc"), HOSTS)
    assert body["audio_url"] == "http://other.example/v2/upload/file_abc"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_every_refused_option_says_why(name: str) -> None:
    with pytest.raises(InvalidRequest) as exc:
        create_body(_req(**{name: True}), HOSTS)
    assert exc.value.param == name and REFUSED[name] in exc.value.message
    create_body(_req(**{name: False}), HOSTS)  # asking for nothing is accepted
    create_body(_req(**{name: None}), HOSTS)


def test_speakers_expected_needs_speaker_labels() -> None:
    with pytest.raises(InvalidRequest, match="needs speaker_labels"):
        create_body(_req(speakers_expected=2), HOSTS)
    body = create_body(_req(speakers_expected=2, speaker_labels=True), HOSTS)
    assert body["metadata"][OPTIONS_KEY]["speakers_expected"] == 2
    with pytest.raises(ValueError):
        _req(speakers_expected=0)


def _refused(param: str, **fields: object) -> str:
    """The message of the 400 a /v2 body gets, checked to name ``param``."""
    with pytest.raises(InvalidRequest) as exc:
        create_body(parse_body(AaiCreateTranscript, json.dumps(
            {"audio_url": "https://cdn.example/a.wav", **fields}).encode()), HOSTS)
    assert exc.value.param == param
    return exc.value.message


def test_speaker_options_become_the_jobs_bounds() -> None:
    """The SDK's speaker_options map onto the spec's bounds; the answer repeats them."""
    config = aai.TranscriptionConfig(speaker_labels=True, speaker_options=aai.SpeakerOptions(
        min_speakers_expected=2, max_speakers_expected=4))
    sent = aai.types.TranscriptRequest(audio_url="https://cdn.example/a.wav",
                                       **config.raw.dict(exclude_none=True))
    req = AaiCreateTranscript.model_validate(sent.dict(exclude_none=True, by_alias=True))
    body = create_body(req, HOSTS)
    assert body["metadata"][OPTIONS_KEY]["speaker_options"] == {
        "min_speakers_expected": 2, "max_speakers_expected": 4}
    fields = job_fields(req)
    assert fields == {"diarize": True, "speakers_expected": None,
                      "min_speakers_expected": 2, "max_speakers_expected": 4,
                      "multichannel": False, "redaction": None, "vocabulary": None}
    spec = JobSpec(transcript_id="tr_1", account_id="a", key_id="k", created_at=T0, **fields)
    assert spec.speaker_count() == SpeakerCount(at_least=2, at_most=4)
    only_max = job_fields(_req(speaker_labels=True,
                               speaker_options={"max_speakers_expected": 3}))
    assert JobSpec(transcript_id="tr_1", account_id="a", key_id="k", created_at=T0,
                   **only_max).speaker_count() == SpeakerCount(at_least=1, at_most=3)
    transcript = _transcript().model_copy(update={"metadata": body["metadata"]})
    parsed = aai.types.TranscriptResponse.parse_obj(
        json.loads(aai_transcript(transcript, BASE).model_dump_json()))
    assert parsed.speaker_options == aai.SpeakerOptions(min_speakers_expected=2,
                                                        max_speakers_expected=4)


def test_only_speaker_labels_diarizes() -> None:
    """AssemblyAI diarizes only with speaker_labels (default false); /v1 always does. A job
    neither diarized nor multichannel is completed by transcribe; a multichannel one's
    speakers are its channels (the diarize stage assembles them)."""
    def spec(req: AaiCreateTranscript | None) -> JobSpec:
        return JobSpec(transcript_id="tr_1", account_id="a", key_id="k", created_at=T0,
                       **(job_fields(req) if req else {}))
    assert spec(_req()).diarize is False and spec(_req()).assembled_by_transcribe
    assert not spec(_req(speaker_labels=False)).diarize
    labelled = spec(_req(speaker_labels=True))
    assert labelled.diarize and not labelled.assembled_by_transcribe
    channels = spec(_req(multichannel=True))
    assert not channels.diarize and not channels.assembled_by_transcribe
    assert spec(None).diarize and not spec(None).assembled_by_transcribe  # /v1


@pytest.mark.parametrize("fields, param, words", [
    ({"speaker_options": {"min_speakers_expected": 2}}, "speaker_options",
     "needs speaker_labels"),
    ({"speaker_labels": True, "speakers_expected": 2,
      "speaker_options": {"max_speakers_expected": 3}}, "speaker_options", "not both"),
    ({"speaker_labels": True, "speaker_options": {"min_speakers_expected": 4,
                                                  "max_speakers_expected": 2}},
     "speaker_options", "(4) is more than max_speakers_expected (2)"),
    ({"speaker_labels": True, "speaker_options": {"min_speakers_expected": 0}},
     "speaker_options.min_speakers_expected", "greater than or equal to 1"),
    ({"speaker_labels": True, "speaker_options": {"max_speakers_expected": 21}},
     "speaker_options.max_speakers_expected", "less than or equal to 20"),
    ({"speaker_labels": True, "speaker_options": {"max_speakers_expected": "3"}},
     "speaker_options.max_speakers_expected", "valid integer"),
    ({"speaker_labels": True, "speaker_options": {"max_speakers_expected": 2.0}},
     "speaker_options.max_speakers_expected", "valid integer"),
    ({"speaker_labels": True, "speaker_options": [2, 3]}, "speaker_options", "Invalid"),
    ({"speaker_labels": True, "speaker_options": {"use_two_stage_clustering": True}},
     "speaker_options.use_two_stage_clustering", "one diarization method"),
    ({"speaker_labels": True, "speaker_options": {"long_file_diarization_method": "standard"}},
     "speaker_options.long_file_diarization_method", "one diarization method"),
])
def test_bad_speaker_hints_are_refused(fields: dict, param: str, words: str) -> None:
    assert words in _refused(param, **fields)


def test_empty_speaker_options_ask_for_nothing() -> None:
    for options in ({}, None, {"min_speakers_expected": None, "use_two_stage_clustering": False}):
        req = _req(speaker_options=options)
        body = create_body(req, HOSTS)
        assert body["metadata"][OPTIONS_KEY]["speaker_options"] is None
        assert job_fields(req) == {"diarize": False, "speakers_expected": None,
                                   "multichannel": False, "redaction": None, "vocabulary": None}


def test_unknown_options_and_languages_are_refused() -> None:
    with pytest.raises(InvalidRequest, match="Unknown field 'shiny'"):
        create_body(_req(shiny=1), HOSTS)
    with pytest.raises(InvalidRequest, match="English only"):
        create_body(_req(language_code="fr"), HOSTS)


def test_completed_transcript_parses_with_the_sdk() -> None:
    out = json.loads(aai_transcript(_transcript(), BASE).model_dump_json())
    parsed = aai.types.TranscriptResponse.parse_obj(out)
    assert parsed.status == aai.TranscriptStatus.completed and parsed.audio_duration == 56
    assert parsed.audio_url == f"{BASE}/v2/upload/file_abc"
    assert [(w.start, w.end, w.speaker) for w in parsed.words] == [(500, 900, "A"),
                                                                    (1200, 1400, "B")]
    assert [u.speaker for u in parsed.utterances] == ["A", "B"]
    assert parsed.utterances[1].words[0].start == 1200


def test_confidences_come_from_the_stored_result() -> None:
    t = _transcript()
    result = TranscriptResult(text=t.text or "", words=t.words or [],
                              utterances=t.utterances or [], word_confidence=[0.9, 0.5])
    parsed = aai.types.TranscriptResponse.parse_obj(
        json.loads(aai_transcript(t, BASE, result).model_dump_json()))
    assert [w.confidence for w in parsed.words] == [0.9, 0.5] and parsed.confidence == 0.7
    assert [u.confidence for u in parsed.utterances] == [0.9, 0.5]
    assert "word_confidence" not in result.public()
    old = aai_transcript(t, BASE)  # a result stored before confidences were kept
    assert old.confidence is None and {w.confidence for w in old.words or []} == {1.0}


def test_without_speaker_labels_there_are_no_speakers() -> None:
    parsed = aai.types.TranscriptResponse.parse_obj(
        json.loads(aai_transcript(_transcript(labels=False), BASE).model_dump_json()))
    assert parsed.utterances is None and {w.speaker for w in parsed.words} == {None}
    assert parsed.speaker_labels is False


def test_a_v1_transcript_read_under_v2_shows_its_speakers() -> None:
    """A job created under /v1 was diarized: /v2 answers it as one with speaker_labels."""
    parsed = aai.types.TranscriptResponse.parse_obj(
        json.loads(aai_transcript(_transcript(labels=None), BASE).model_dump_json()))
    assert parsed.speaker_labels is True
    assert [u.speaker for u in parsed.utterances or []] == ["A", "B"]
    assert [w.speaker for w in parsed.words or []] == ["A", "B"]


def test_multichannel_is_taken_and_answered_by_channel() -> None:
    config = aai.TranscriptionConfig(multichannel=True)
    sent = aai.types.TranscriptRequest(audio_url=upload_url(BASE, "file_abc"),
                                       **config.raw.dict(exclude_none=True))
    body = create_body(AaiCreateTranscript.model_validate(
        sent.dict(exclude_none=True, by_alias=True)), HOSTS)
    assert body["metadata"][OPTIONS_KEY]["multichannel"] is True
    assert "multichannel" not in create_body(_req(multichannel=False), HOSTS)["metadata"][
        OPTIONS_KEY]
    with pytest.raises(InvalidRequest, match="speaker_labels with multichannel") as exc:
        create_body(_req(multichannel=True, speaker_labels=True), HOSTS)
    assert exc.value.param == "speaker_labels"

    t = _transcript(labels=None).model_copy(
        update={"metadata": {OPTIONS_KEY: {"multichannel": True}}})
    result = TranscriptResult(text=t.text or "", words=t.words or [],
                              utterances=t.utterances or [], audio_channels=3)
    parsed = aai.types.TranscriptResponse.parse_obj(
        json.loads(aai_transcript(t, BASE, result).model_dump_json()))
    assert parsed.multichannel is True and parsed.audio_channels == 3
    assert [(w.speaker, w.channel) for w in parsed.words] == [("1", "1"), ("2", "2")]
    assert [(u.speaker, u.channel) for u in parsed.utterances] == [("1", "1"), ("2", "2")]
    assert [w.channel for u in parsed.utterances for w in u.words] == ["1", "2"]
    assert "audio_channels" not in result.public()
    plain = aai_transcript(_transcript(), BASE, result)  # not multichannel: no channels
    assert plain.audio_channels is None and {w.channel for w in plain.words or []} == {None}


def test_error_transcript_carries_the_message_only() -> None:
    parsed = aai.types.TranscriptResponse.parse_obj(
        json.loads(aai_transcript(_transcript(status="error"), BASE).model_dump_json()))
    assert parsed.status == aai.TranscriptStatus.error and parsed.error == "Not audio."
    assert parsed.text is None and parsed.words is None


def test_list_pages_to_older_transcripts() -> None:
    page = [_transcript(), _transcript(status="error").model_copy(update={"id": "tr_0"})]
    out = aai_list(page, True, 2, BASE, f"{BASE}/v2/transcript?limit=2", None)
    parsed = aai.types.ListTranscriptResponse.parse_obj(json.loads(out.model_dump_json()))
    assert [t.id for t in parsed.transcripts] == ["tr_1", "tr_0"]
    assert parsed.page_details.before_id_of_prev_url == "tr_0"
    assert parsed.transcripts[1].error == "Not audio."
    last = aai_list(page, False, 2, BASE, f"{BASE}/v2/transcript", None)
    assert last.page_details.prev_url is None


def test_captions_lose_speaker_labels_but_keep_turns() -> None:
    t = _transcript()
    result = unlabelled(TranscriptResult(text=t.text or "", words=t.words or [],
                                         utterances=t.utterances or []))
    assert {w.speaker for w in result.words} == {""}
    assert [u.text for u in result.utterances] == ["hello", "hi"]


def test_webhook_body_is_assemblyais() -> None:
    assert json.loads(event_body("completed", "tr_1", {"x": 1}, "assemblyai")) == \
        {"transcript_id": "tr_1", "status": "completed"}
    assert json.loads(event_body("error", "tr_1", {}, "assemblyai"))["status"] == "error"
