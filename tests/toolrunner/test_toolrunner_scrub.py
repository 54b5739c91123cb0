"""Scrubbing and the output cap, without Docker."""

from __future__ import annotations

import base64
import random
from urllib.parse import quote

import pytest

from toolrunner.output import CappedOutput
from warden.scrub import Scrubber, StreamScrubber

SECRET = "hunter2-Sup3r/Secret+Value="


@pytest.mark.parametrize(
    "form",
    [
        SECRET,
        base64.b64encode(SECRET.encode()).decode(),
        base64.b64encode(SECRET.encode()).decode().rstrip("="),
        base64.urlsafe_b64encode(SECRET.encode()).decode(),
        quote(SECRET, safe=""),
        SECRET.encode().hex(),
        SECRET.encode().hex().upper(),
    ],
)
def test_every_form_of_an_injected_secret_is_masked(form: str) -> None:
    out, count = Scrubber({"DB_PASSWORD": SECRET}).scrub(f"before {form} after")
    assert form not in out
    assert out == "before [masked:secret:DB_PASSWORD] after"
    assert count == 1


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("key AKIAIOSFODNN7EXAMPLE here", "aws_access_key_id"),
        ("ghp_" + "a1B2c3D4e5" * 4, "github_token"),
        ("xoxb-1234567890-abcdefghij", "slack_token"),
        ("AIza" + "S" * 35, "google_api_key"),
        ("sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "stripe_key"),
        ("sk-ant-api03-" + "abcDEF123_-" * 3, "anthropic_key"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "jwt"),
        ("Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123", "bearer"),
        ("https://bob:s3cr3tpw@example.com/x", "url_password"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", "private_key"),
        ("export API_TOKEN=abc123XYZ789", "assignment"),
        ('{"client_secret": "Zx9-Qw8-Er7-Ty6"}', "assignment"),
        ("random=AbC9dEf8GhI7jKl6MnO5pQr4StU3", "high_entropy"),
    ],
)
def test_credential_patterns_are_masked(text: str, label: str) -> None:
    out, count = Scrubber().scrub(text)
    assert f"[masked:{label}]" in out, out
    assert count >= 1


def test_an_unterminated_private_key_is_masked_to_the_end() -> None:
    out, _ = Scrubber().scrub("x\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nmore")
    assert out == "x\n[masked:private_key]"


@pytest.mark.parametrize(
    "text",
    [
        '{"task_id":"task-4f979be03d18","status":"queued"}',
        "sha256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "id=123e4567-e89b-12d3-a456-426614174000",
        "password_policy=required token: none",
    ],
)
def test_ordinary_output_is_left_alone(text: str) -> None:
    assert Scrubber().scrub(text) == (text, 0)


def _stream(scrubber: Scrubber, text: str, sizes: list[int]) -> tuple[str, int]:
    stream = StreamScrubber(scrubber)
    out, pos = [], 0
    for size in sizes:
        out.append(stream.feed(text[pos : pos + size]))
        pos += size
    out.append(stream.feed(text[pos:]))
    out.append(stream.finish())
    return "".join(out), stream.masked


def test_streaming_masks_secrets_split_across_chunks() -> None:
    scrubber = Scrubber({"DB_PASSWORD": SECRET, "API_TOKEN": "tok_9fA7qZ2xK4mN8pR1"})
    filler = "lorem ipsum dolor sit amet " * 80
    text = (
        filler + SECRET + filler + base64.b64encode(SECRET.encode()).decode() + "\n"
        "AKIAIOSFODNN7EXAMPLE " + filler + "-----BEGIN PRIVATE KEY-----\n" + "QUJD" * 600 + "\n"
        "-----END PRIVATE KEY-----\n" + filler + "tok_9fA7qZ2xK4mN8pR1"
    )
    whole, count = scrubber.scrub(text)
    rng = random.Random(7)
    for _ in range(30):
        sizes = [rng.randint(1, 700) for _ in range(rng.randint(1, 40))]
        streamed, streamed_count = _stream(scrubber, text, sizes)
        assert streamed == whole
        assert streamed_count == count
    assert SECRET not in whole and "QUJDQUJD" not in whole and count == 5


def test_the_cap_keeps_head_and_tail_and_counts_what_it_dropped() -> None:
    capped = CappedOutput(100)
    capped.add("HEAD" + "x" * 1000)
    capped.add("y" * 1000 + "TAIL")
    text = capped.text()
    assert capped.truncated and capped.total == 2008
    assert text.startswith("HEAD") and text.endswith("TAIL")
    assert "[... 1908 bytes truncated ...]" in text


def test_the_cap_does_not_truncate_what_fits() -> None:
    capped = CappedOutput(100)
    capped.add("a" * 60)
    capped.add("b" * 40)
    assert not capped.truncated and capped.text() == "a" * 60 + "b" * 40


def test_scrubbing_happens_before_truncation() -> None:
    # The secret straddles where the cap cuts: scrubbed first, so no fragment of it survives.
    scrubber = Scrubber({"S": SECRET})
    capped = CappedOutput(64)
    stream = StreamScrubber(scrubber)
    text = "a" * 20 + SECRET + "b" * 500 + SECRET + "c" * 20
    capped.add(stream.feed(text) + stream.finish())
    out = capped.text()
    assert capped.truncated and SECRET[:8] not in out and SECRET[-8:] not in out
    assert stream.masked == 2


TOKEN = b"tok_9fA7qZ2xK4mN8pR1"


def _leaks(output: str, secret: bytes) -> bool:
    """Whether any base64 spelling of `secret` survives in `output`, line breaks ignored."""
    from warden.scrub import base64_offset_forms

    joined = output.replace("\n", "")
    return any(form in joined for form in base64_offset_forms(secret))


def test_base64_of_an_env_line_holding_the_secret_is_masked() -> None:
    blob = base64.b64encode(b"TASKS_API_TOKEN=" + TOKEN + b"\n").decode()
    assert TOKEN.decode() not in blob  # the plain and whole-value forms cannot find it
    out, count = Scrubber({"TASKS_API_TOKEN": TOKEN.decode()}).scrub(f"the environment {blob} ends\n")
    assert "[masked:secret:TASKS_API_TOKEN]" in out and count == 1
    assert not _leaks(out, TOKEN), out


@pytest.mark.parametrize("prefix", [b"", b"A", b"AB", b"ABC", b"PATH=/bin\nHOME=/tmp\nTASKS_API_TOKEN="])
@pytest.mark.parametrize("urlsafe", [False, True])
def test_the_secret_at_every_byte_offset_inside_base64_is_masked(prefix: bytes, urlsafe: bool) -> None:
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    blob = encode(prefix + TOKEN + b"\n--tail").decode()
    out, _ = Scrubber({"T": TOKEN.decode()}).scrub(blob)
    assert "[masked:secret:T]" in out
    assert not _leaks(out.replace("-", "+").replace("_", "/"), TOKEN), out


@pytest.mark.parametrize("pad", range(0, 80, 7))
def test_base64_wrapped_over_lines_is_masked_where_the_break_falls_inside_the_secret(pad: int) -> None:
    blob = base64.encodebytes(b"X" * pad + b"TASKS_API_TOKEN=" + TOKEN + b"\nHOME=/tmp\n").decode()
    out, _ = Scrubber({"TASKS_API_TOKEN": TOKEN.decode()}).scrub(blob)
    assert "[masked:secret:TASKS_API_TOKEN]" in out
    assert not _leaks(out, TOKEN), out
    # Streaming in small chunks gives the same result as scrubbing the whole text.
    stream = StreamScrubber(Scrubber({"TASKS_API_TOKEN": TOKEN.decode()}), hold_chars=64)
    streamed = "".join(stream.feed(blob[i : i + 5]) for i in range(0, len(blob), 5)) + stream.finish()
    assert streamed == out


@pytest.mark.parametrize(
    ("name", "value"),
    [("password=", "Xk9mQ2vL7pR4tW8z"), ("Authorization: Bearer ", "abcdefghijklmnop123"), ("key = ", "A1b2C3d4E5f6G7h8I9j0K1l2")],
)
def test_streaming_holds_back_the_name_that_makes_a_value_a_secret(name: str, value: str) -> None:
    # A find straddling the hold cut used to be held back from its own start only: the name
    # (`password=`, `Bearer `) was released, and the value, rescanned without it, went out clear.
    scrubber = Scrubber({})
    for tail in range(960, 1060):
        text = "x " * 600 + name + value + " " + "y" * tail
        whole, count = scrubber.scrub(text)
        assert value not in whole and count == 1
        streamed, streamed_count = _stream(scrubber, text, [len(text)])
        assert (streamed, streamed_count) == (whole, count), tail


def test_a_find_growing_past_the_hold_limit_is_masked_to_its_end_as_when_whole() -> None:
    scrubber = Scrubber({})
    body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcw"
    for text in (
        "-----BEGIN PRIVATE KEY-----\n" + body + "A" * 1_300_000 + "\n-----END PRIVATE KEY-----\nafter",
        "token=" + "Zx9q" * 330_000 + " world",
    ):
        whole, count = scrubber.scrub(text)
        streamed, streamed_count = _stream(scrubber, text, [65536] * 21)
        assert (streamed, streamed_count) == (whole, count) and body not in streamed and count == 1


class _CountingScrubber(Scrubber):
    """The real scrubber, counting the characters it scans."""

    scanned = 0

    def spans(self, text: str):  # type: ignore[no-untyped-def]
        self.scanned += len(text)
        return super().spans(text)


@pytest.mark.parametrize("text", [
    pytest.param("lorem ipsum dolor sit amet\n" * 8000, id="plain-output"),
    pytest.param("-----BEGIN PRIVATE KEY-----\n" + "QUJD" * 75_000, id="a-find-growing-towards-the-limit"),
])
def test_a_stream_written_a_character_at_a_time_is_scanned_in_linear_work(text: str) -> None:
    """The scrubber runs in the toolrunner, outside the container's CPU limit: a tool that writes
    byte by byte (or a find that keeps growing) must not make it scan the held text per chunk."""
    counting = _CountingScrubber({"DB_PASSWORD": SECRET})
    stream = StreamScrubber(counting)
    out = [stream.feed(c) for c in text]
    out.append(stream.finish())
    assert "".join(out) == counting.scrub(text)[0]  # the same result as scrubbing it whole
    assert counting.scanned <= 8 * len(text) + 4 * 1024 * 1024, counting.scanned  # every char scanned a few times


def test_a_long_run_of_packed_finds_streams_as_when_whole() -> None:
    """Access keys printed line after line sit closer than a find's anchor reaches back, so the
    finds chain: holding back one holds back all before it. The result is still the whole text's,
    and the held text is not scanned again per chunk."""
    keys = "".join(f"AKIA{i:016d}\n".replace("0", "Q") for i in range(52_000))
    counting = _CountingScrubber({})
    streamed, count = _stream(counting, keys, [4096] * (len(keys) // 4096 + 1))
    assert (streamed, count) == counting.scrub(keys)
    assert count == 52_000 and "AKIA" not in streamed
    assert counting.scanned <= 8 * len(keys) + 4 * 1024 * 1024, counting.scanned
