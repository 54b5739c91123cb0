"""A signed policy bundle is taken only whole and as signed: every attack on one is refused with its
code, nothing is unpacked, and the set in force (the last good bundle) stays in force."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from checkpoint.policy import bundle as bundles
from checkpoint.policy.bundle import BundleError, build, verify
from checkpoint.server.bundle_source import BundleSource
from warden import codes

TOOL = "kind: Tool\nname: ping\naccess: read\ninput_schema: {type: object}\n"
OFF = 'kind: OffLimits\nsubjects:\n  - pattern: "*.gov"\n    reason: government systems\n'
KEY = Ed25519PrivateKey.generate()


def _folder(root: Path, off: str = OFF) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "tool.yaml").write_text(TOOL)
    (root / "off-limits.yaml").write_text(off)
    return root


def _tar(members: list[tarfile.TarInfo | tuple[str, bytes]], *, serial: int = 1, key: Ed25519PrivateKey = KEY,
         listed: dict[str, bytes] | None = None, manifest: bytes | None = None) -> bytes:
    """A bundle made by hand: `members` as given, with a manifest signed by `key` that lists
    `listed` (default: the members under policy/ that carry bytes)."""
    if listed is None:
        listed = {m[0][len("policy/"):]: m[1] for m in members if isinstance(m, tuple) and m[0].startswith("policy/")}
    if manifest is None:
        manifest = json.dumps({"format": bundles.FORMAT, "serial": serial, "revision": "r", "created": "",
                               "files": {n: hashlib.sha256(d).hexdigest() for n, d in listed.items()}}).encode()
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb") as packed, tarfile.open(fileobj=packed, mode="w") as tar:
        for name, data in [(bundles.MANIFEST_NAME, manifest),
                           (bundles.SIGNATURE_NAME, base64.b64encode(key.sign(manifest)))]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tar.addfile(info, io.BytesIO(member[1]))
    return out.getvalue()


def _special(name: str, kind: bytes, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def _refused(data: bytes, code: str, **kw) -> BundleError:
    with pytest.raises(BundleError) as caught:
        verify(data, KEY.public_key(), **kw)
    assert caught.value.code == code, caught.value
    return caught.value


def test_a_bundle_built_from_a_folder_verifies_with_its_files_and_revision(tmp_path):
    folder = _folder(tmp_path / "p")
    data = build(folder, KEY, 7)
    got = verify(data, KEY.public_key())
    assert got.serial == 7
    assert got.files == {"tool.yaml": TOOL.encode(), "off-limits.yaml": OFF.encode()}
    from warden.policyfiles import read_policy_files, revision_of

    assert got.revision == revision_of(read_policy_files(folder))


@pytest.mark.parametrize("name", ["policy/../../etc/cron.d/x.yaml", "/etc/x.yaml", "policy/a/../../x.yaml",
                                  "../policy/x.yaml", "policy\\..\\x.yaml", "policy/.hidden/x.yaml", "x.yaml"])
def test_a_member_outside_the_policy_folder_is_refused(name):
    _refused(_tar([("policy/tool.yaml", TOOL.encode()), (name, b"kind: Tool\n")]), codes.BUNDLE_UNSAFE_PATH)


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE,
                                  tarfile.FIFOTYPE])
def test_a_link_device_or_fifo_is_refused(kind):
    member = _special("policy/off-limits.yaml", kind, "/etc/passwd")
    _refused(_tar([("policy/tool.yaml", TOOL.encode()), member]), codes.BUNDLE_UNSAFE_PATH)


def test_a_signature_by_another_key_is_refused():
    _refused(_tar([("policy/tool.yaml", TOOL.encode())], key=Ed25519PrivateKey.generate()),
             codes.BUNDLE_BAD_SIGNATURE)


def test_a_signature_of_a_manifest_that_was_edited_after_is_refused(tmp_path):
    data = build(_folder(tmp_path / "p"), KEY, 2)
    members = _members(data)
    members[bundles.MANIFEST_NAME] = members[bundles.MANIFEST_NAME].replace(b'"serial":2', b'"serial":9')
    _refused(_repack(members), codes.BUNDLE_BAD_SIGNATURE)


def test_no_signature_is_refused(tmp_path):
    members = _members(build(_folder(tmp_path / "p"), KEY, 2))
    del members[bundles.SIGNATURE_NAME]
    _refused(_repack(members), codes.BUNDLE_UNSIGNED)


def test_a_file_changed_after_signing_is_refused(tmp_path):
    members = _members(build(_folder(tmp_path / "p"), KEY, 2))
    members["policy/off-limits.yaml"] = b"kind: OffLimits\nsubjects: []\n"  # the off-limits list emptied
    _refused(_repack(members), codes.BUNDLE_DIGEST_MISMATCH)


def test_a_file_added_or_removed_after_signing_is_refused(tmp_path):
    members = _members(build(_folder(tmp_path / "p"), KEY, 2))
    added = dict(members, **{"policy/rules/allow.yaml": b"kind: Rule\n"})
    _refused(_repack(added), codes.BUNDLE_DIGEST_MISMATCH)
    del members["policy/off-limits.yaml"]  # the narrowing file left out: the set would widen
    _refused(_repack(members), codes.BUNDLE_DIGEST_MISMATCH)


def test_a_file_in_the_bundle_twice_is_refused():
    data = _tar([("policy/tool.yaml", TOOL.encode()), ("policy/tool.yaml", b"other")],
                listed={"tool.yaml": TOOL.encode()})
    _refused(data, codes.BUNDLE_MALFORMED)


def test_not_a_gzip_tar_is_refused():
    _refused(b"\x1f\x8b not really", codes.BUNDLE_MALFORMED)
    _refused(b"", codes.BUNDLE_MALFORMED)


def test_an_oversize_bundle_is_refused_unread(monkeypatch, tmp_path):
    data = build(_folder(tmp_path / "p"), KEY, 2)
    monkeypatch.setattr(bundles, "MAX_BUNDLE_BYTES", len(data) - 1)
    _refused(data, codes.BUNDLE_TOO_LARGE)
    monkeypatch.setattr(bundles, "MAX_BUNDLE_BYTES", len(data))  # at the cap: taken
    assert verify(data, KEY.public_key()).serial == 2


def test_a_bundle_that_unpacks_too_large_is_refused(monkeypatch):
    big = b"#" * 4096  # compresses to almost nothing: the unpacked size is what counts
    monkeypatch.setattr(bundles, "MAX_UNPACKED_BYTES", 8000)
    _refused(_tar([("policy/a.yaml", big), ("policy/b.yaml", big)]), codes.BUNDLE_TOO_LARGE)


def test_too_many_files_are_refused(monkeypatch):
    monkeypatch.setattr(bundles, "MAX_FILES", 3)
    files = [(f"policy/f{i}.yaml", b"") for i in range(4)]
    _refused(_tar(files), codes.BUNDLE_TOO_LARGE)
    assert verify(_tar(files[:3]), KEY.public_key()).serial == 1


def test_an_older_serial_or_the_same_serial_with_other_content_is_a_rollback(tmp_path):
    folder = _folder(tmp_path / "p")
    in_force = build(folder, KEY, 5)
    manifest = _members(in_force)[bundles.MANIFEST_NAME]
    _refused(build(folder, KEY, 4), codes.BUNDLE_ROLLBACK, in_force=5, in_force_manifest=manifest)
    (folder / "off-limits.yaml").write_text("kind: OffLimits\nsubjects: []\n")
    _refused(build(folder, KEY, 5), codes.BUNDLE_ROLLBACK, in_force=5, in_force_manifest=manifest)
    assert verify(in_force, KEY.public_key(), in_force=5, in_force_manifest=manifest).serial == 5  # the same one
    assert verify(build(folder, KEY, 6), KEY.public_key(), in_force=5, in_force_manifest=manifest).serial == 6


def test_a_refused_bundle_leaves_the_last_good_installed_and_unpacks_nothing(tmp_path):
    """The source end to end on a mounted file: good, then each attack, then good again."""
    served, link = tmp_path / "configmap" / "policy.tar.gz", tmp_path / "data" / "policies"
    served.parent.mkdir()
    source = BundleSource(str(served), KEY.public_key(), link)
    served.write_bytes(build(_folder(tmp_path / "p1"), KEY, 1))
    assert source.poll_once() == "applied"
    good = (link / "off-limits.yaml").read_text()
    before = sorted(p.name for p in link.parent.rglob("*"))
    evil = [
        _tar([("policy/../../escaped.yaml", b"x")], serial=9),
        _tar([_special("policy/off-limits.yaml", tarfile.SYMTYPE, "/dev/null")], serial=9, listed={}),
        _tar([("policy/off-limits.yaml", b"kind: OffLimits\nsubjects: []\n")], serial=9,
             key=Ed25519PrivateKey.generate()),
        build(_folder(tmp_path / "p0", "kind: OffLimits\nsubjects: []\n"), KEY, 1),  # a replay at the serial in force
        build(_folder(tmp_path / "bad", "kind: Nonsense\n"), KEY, 10),  # signed, but does not load
    ]
    for data in evil:
        served.write_bytes(data)
        assert source.poll_once() == "refused"
        assert (link / "off-limits.yaml").read_text() == good
        assert sorted(p.name for p in link.parent.rglob("*")) == before  # no staging, no new snapshot left
    assert source.status.refusals == {codes.BUNDLE_UNSAFE_PATH: 2, codes.BUNDLE_BAD_SIGNATURE: 1,
                                      codes.BUNDLE_ROLLBACK: 1, codes.BUNDLE_DOES_NOT_LOAD: 1}
    assert not (tmp_path / "escaped.yaml").exists() and not (link.parent / "escaped.yaml").exists()
    assert source.status.serial == 1 and not source.status.last_ok
    served.write_bytes(build(_folder(tmp_path / "p2", OFF.replace("*.gov", "*.mil")), KEY, 2))
    assert source.poll_once() == "applied"
    assert "*.mil" in (link / "off-limits.yaml").read_text() and source.status.last_ok


def test_a_restart_remembers_the_serial_in_force(tmp_path):
    served, link = tmp_path / "b.tar.gz", tmp_path / "data" / "policies"
    served.write_bytes(build(_folder(tmp_path / "p"), KEY, 3))
    assert BundleSource(str(served), KEY.public_key(), link).poll_once() == "applied"
    old = build(_folder(tmp_path / "old", "kind: OffLimits\nsubjects: []\n"), KEY, 2)
    served.write_bytes(old)
    again = BundleSource(str(served), KEY.public_key(), link)  # a new process: the serial read from the snapshot
    assert again.status.serial == 3
    assert again.poll_once() == "refused" and again.status.last_code == codes.BUNDLE_ROLLBACK


def test_a_real_folder_at_the_link_is_refused_at_start(tmp_path):
    (tmp_path / "policies").mkdir()
    with pytest.raises(ValueError, match="is a folder"):
        BundleSource(str(tmp_path / "b.tar.gz"), KEY.public_key(), tmp_path / "policies")


def _members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isreg()}  # type: ignore[union-attr]


def _repack(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb") as packed, tarfile.open(fileobj=packed, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_the_commands_sign_only_a_folder_that_loads_and_never_overwrite_a_key(tmp_path, capsys):
    from warden.cli import main
    from warden.token_keys import load_public_pem

    key = tmp_path / "signing.pem"
    assert main(["policy", "bundle-key", str(key)]) == 0
    first = key.read_bytes()
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert main(["policy", "bundle-key", str(key)]) == 2 and key.read_bytes() == first
    public = load_public_pem((tmp_path / "signing.pub.pem").read_text())
    out = tmp_path / "policy.tar.gz"
    assert main(["policy", "bundle", str(_folder(tmp_path / "p")), "--key", str(key), "--serial", "4",
                 "-o", str(out)]) == 0
    assert verify(out.read_bytes(), public).serial == 4
    broken = _folder(tmp_path / "broken", "kind: OffLimits\nsubjects: [\n")
    again = tmp_path / "again.tar.gz"
    assert main(["policy", "bundle", str(broken), "--key", str(key), "--serial", "5", "-o", str(again)]) == 3
    assert not again.exists()
    assert main(["policy", "bundle", str(broken), "--key", str(key), "--serial", "0", "-o", str(again)]) == 2
