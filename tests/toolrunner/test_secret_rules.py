"""Token formats masked by the shape layer that comes from gitleaks' maintained rule set
(warden/data/gitleaks.toml, read by warden/secret_rules.py). The tokens are fakes of the right
shape: each vendor's prefix and alphabet, random enough to pass the rule's entropy floor."""

from __future__ import annotations

import random
import string

import pytest

from warden.scrub import Scrubber, StreamScrubber
from warden.secret_rules import RULES_FILE, gitleaks, load

_rng = random.Random(26)


def _pick(alphabet: str, n: int) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


HEX = "0123456789abcdef"
ALNUM = string.ascii_letters + string.digits
LOWER_ALNUM = string.ascii_lowercase + string.digits

# (format, fake token, the rule that masks it)
FORMATS = [
    ("SendGrid", "SG." + _pick(ALNUM, 22) + "." + _pick(ALNUM, 43), "sendgrid-api-token"),
    ("npm", "npm_" + _pick(LOWER_ALNUM, 36), "npm-access-token"),
    ("PyPI", "pypi-AgEIcHlwaS5vcmc" + _pick(ALNUM + "-_", 70), "pypi-upload-token"),
    ("Hugging Face", "hf_" + _pick(string.ascii_letters, 34), "huggingface-access-token"),
    ("Twilio", "SK" + _pick(HEX, 32), "twilio-api-key"),
    ("DigitalOcean", "dop_v1_" + _pick(HEX, 64), "digitalocean-pat"),
    ("Databricks", "dapi" + _pick(HEX, 32), "databricks-api-token"),
    ("Shopify", "shpat_" + _pick(HEX, 32), "shopify-access-token"),
    ("GitHub", "ghp_" + _pick(ALNUM, 36), None),
    ("GitLab", "glpat-" + _pick(ALNUM, 20), None),
    ("Slack", "xoxb-" + _pick(string.digits, 11) + "-" + _pick(string.digits, 12) + "-" + _pick(ALNUM, 24), None),
    ("Stripe", "sk_live_" + _pick(ALNUM, 24), None),
    ("Google", "AIza" + _pick(ALNUM, 35), None),
    ("AWS", "AKIA" + _pick(string.ascii_uppercase + "234567", 16), None),
]


@pytest.mark.parametrize(("name", "token", "rule"), FORMATS, ids=[f[0] for f in FORMATS])
@pytest.mark.parametrize("around", ["{}", "token: {}\n", 'export KEY="{}"', "'{}'", "{} trailing words"])
def test_a_token_printed_bare_is_masked(name: str, token: str, rule: str | None, around: str) -> None:
    text = around.format(token)
    out, count = Scrubber().scrub(text)
    assert token not in out and count >= 1, out
    if rule is not None:  # formats warden had no hand-written shape for: the rule set's own label
        assert f"[masked:{rule}]" in out, out


@pytest.mark.parametrize(("name", "token", "rule"), FORMATS[:8], ids=[f[0] for f in FORMATS[:8]])
def test_a_token_split_across_chunks_is_masked_as_when_whole(name: str, token: str, rule: str) -> None:
    text = "lorem ipsum\n" * 200 + f"the key is {token} ok\n" + "dolor\n" * 50
    stream = StreamScrubber(Scrubber())
    middle = text.index(token) + len(token) // 2
    out = stream.feed(text[:middle]) + stream.feed(text[middle:]) + stream.finish()
    assert out == Scrubber().scrub(text)[0] and token not in out


def test_the_rule_set_is_vendored_whole_with_its_licence() -> None:
    assert "MIT License" in RULES_FILE.with_name("gitleaks.LICENSE").read_text()
    rules = gitleaks().rules
    assert len(rules) >= 200  # every rule that reads text, compiled (a rule that failed would stop the load)
    assert {r.id for r in rules} >= {rule for _n, _t, rule in FORMATS if rule}
    assert "generic-api-key" not in {r.id for r in rules}  # the assignment layers do its job


def test_a_token_the_rules_allowlist_is_left_alone() -> None:
    # gitleaks' allowlists: the alphabet as a stopword, AWS's documentation example key
    assert list(gitleaks().finds("hf_abcdefghijklmnopqrstuvwxyzABCDEFGH")) == []
    assert list(gitleaks().finds("AKIAIOSFODNN7EXAMPLE")) == []


def test_a_rule_below_its_entropy_floor_finds_nothing() -> None:
    assert not list(gitleaks().finds("dapi" + "0" * 32))  # Databricks' shape, no randomness


def test_a_keyword_once_in_a_large_output_keeps_the_scan_linear() -> None:
    """The keyword-context rules start with `[\\w.-]{0,50}?` (nested, in some): read as written by
    a backtracking engine, one keyword made each position cost up to 2,500 steps. That lead only
    stretches a match back over a name, so it is dropped when the rule is read."""
    text = "cohere meraki discord " + _pick(string.ascii_letters + " =:\n", 200_000)
    assert list(gitleaks().finds(text)) == []
    for rule in gitleaks().rules:
        assert not rule.pattern.pattern.startswith(("[\\w.-]{0,", "(?i)[\\w.-]{0,", "(?i:[\\w.-]{0,")), rule.id


def test_without_the_automaton_the_same_keywords_are_found() -> None:
    with_it, without = gitleaks(), load()
    without._automaton = None  # type: ignore[attr-defined]
    text = "\n".join(token for _n, token, _r in FORMATS) + "\nask a task\n"
    assert [(f.label, f.start, f.end) for f in with_it.finds(text)] == \
        [(f.label, f.start, f.end) for f in without.finds(text)]
