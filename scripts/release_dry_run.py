#!/usr/bin/env python
"""The release workflow's build, SBOM, sign and verify steps, run here (docs/release.md).

.github/workflows/release.yml runs the same steps on a tag with the real signer (cosign, keyless:
a Fulcio certificate for the workflow's OIDC identity, the signature logged in Rekor) and the real
image build (buildx, amd64 and arm64). Here the two things that need the network or a container
engine are stood in for: signing uses an ephemeral ECDSA P-256 key in place of the Fulcio
certificate (cosign's keyless signature is ECDSA P-256 over SHA-256 too), and the image is its
build context (ansible-builder create) rather than an image. Everything else is what the workflow
runs: the version and changelog checks, the tarball, the importer (with --importer), the CycloneDX
SBOM of the collection's Python dependencies, the checksums and the verification of all of it.

Each step prints PASS, FAIL or SKIP with its reason; the exit code is 1 when any step fails.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PLATFORMS = ("linux/amd64", "linux/arm64")
AGE_SECRET = re.compile(rb"AGE-SECRET-KEY-1[0-9A-Z]{50,}")
REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*(?P<op>==|>=)\s*(?P<version>[^\s;#]+)")


class StepError(Exception):
    pass


def _bin(name):
    found = Path(sys.executable).with_name(name)
    return str(found) if found.exists() else name


def _sbom_bin():
    """cyclonedx-py from the SBOM tool's own virtual environment (.venv/sbom: requirements-sbom.txt)."""
    found = Path(sys.prefix) / "sbom" / "bin" / "cyclonedx-py"
    return str(found) if found.exists() else "cyclonedx-py"


def _run(argv, cwd=ROOT, **kwargs):
    try:
        run = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, **kwargs)
    except OSError as exc:
        raise StepError(f"{argv[0]} cannot run ({exc.strerror}): make setup installs it") from exc
    if run.returncode != 0:
        raise StepError(
            f"{' '.join(map(str, argv[:3]))} failed ({run.returncode}): {(run.stderr or run.stdout)[-1500:]}"
        )
    return run.stdout


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def galaxy_version(root=ROOT):
    return str(yaml.safe_load((root / "galaxy.yml").read_text(encoding="utf-8"))["version"])


# --- steps ---------------------------------------------------------------------------------------


def step_version(ctx):
    """The tag is galaxy.yml's version and the changelog has a release of it."""
    version = galaxy_version(ctx["root"])
    tag = ctx["tag"] or version
    if tag != version:
        raise StepError(
            f"tag {tag} is not galaxy.yml's version {version}: set version: {tag} in galaxy.yml or tag {version}"
        )
    ctx["version"] = version
    if version in _releases(ctx["root"]):
        return f"{version}, in changelogs/changelog.yaml"
    if ctx["tag"]:
        # A tag publishes: its commit must carry the release (docs/release.md, step 2).
        raise StepError(
            f"changelogs/changelog.yaml has no release {version}: run antsibull-changelog release --version {version}"
        )
    # Before the tag, changelog.yaml records only published releases (test_changelog), so the dry run
    # rehearses step 2 on a copy of the checkout and goes on from that copy.
    ctx["root"] = _rehearse_release(ctx["root"], ctx["out"] / "rehearsal", version)
    if version not in _releases(ctx["root"]):
        raise StepError(f"antsibull-changelog release --version {version} recorded no release {version}")
    return f"{version}, not released yet: antsibull-changelog release rehearsed in {ctx['root']}"


def _tool_env(**extra):
    """The environment for a tool that starts others: this interpreter's bin folder first on PATH."""
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", **extra)


def _releases(root):
    return yaml.safe_load((root / "changelogs" / "changelog.yaml").read_text(encoding="utf-8"))["releases"] or {}


def _rehearse_release(root, copy, version):
    """The checkout's files (tracked, and untracked ones git does not ignore) in `copy`, released there."""
    listed = _run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"])
    shutil.rmtree(copy, ignore_errors=True)
    for name in filter(None, listed.split("\0")):
        source = root / name
        if source.is_file() and not source.is_symlink():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    # antsibull-changelog calls ansible-doc, which must be the virtual environment's.
    _run([_bin("antsibull-changelog"), "release", "--version", version], cwd=copy, env=_tool_env())
    return copy


def step_changelog(ctx):
    """CHANGELOG.rst is what antsibull-changelog generates from changelog.yaml; the release notes."""
    version = ctx["version"]
    text = (ctx["root"] / "CHANGELOG.rst").read_text(encoding="utf-8")
    if not re.search(rf"^v{re.escape(version)}\n=+$", text, re.M):
        raise StepError(f"CHANGELOG.rst has no v{version} section: antsibull-changelog generate")
    release = _releases(ctx["root"])[version]
    notes = ctx["out"] / "release-notes.md"
    notes.write_text(release_notes(version, release), encoding="utf-8")
    return f"{notes.name} ({len(notes.read_text(encoding='utf-8').splitlines())} lines)"


SECTIONS = (
    ("release_summary", "Summary"),
    ("major_changes", "Major changes"),
    ("minor_changes", "Minor changes"),
    ("breaking_changes", "Breaking changes"),
    ("deprecated_features", "Deprecated features"),
    ("removed_features", "Removed features"),
    ("security_fixes", "Security fixes"),
    ("bugfixes", "Bugfixes"),
)


def release_notes(version, release):
    """The GitHub release body: the version's changelog sections (antsibull-changelog's order)."""
    changes = release.get("changes") or {}
    lines = [f"# krops.platform {version}", ""]
    for key, title in SECTIONS:
        value = changes.get(key)
        if not value:
            continue
        lines += [f"## {title}", ""]
        lines += [value.strip(), ""] if isinstance(value, str) else [f"- {item.strip()}" for item in value] + [""]
    for kind in ("modules", "plugins", "objects"):
        new = release.get(kind)
        if isinstance(new, dict):
            new = [item for group in new.values() for item in group]
        if new:
            lines += [f"## New {kind}", ""] + [f"- `{i['name']}`: {i.get('description', '')}" for i in new] + [""]
    return "\n".join(lines)


def step_build(ctx):
    """The tarball (scripts/build_collection.py: build_ignore, then the secret check)."""
    dist = ctx["out"] / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    tarball = Path(
        _run([sys.executable, "scripts/build_collection.py", "--source", ctx["root"], "--output", dist]).strip()
    )
    expected = f"krops-platform-{ctx['version']}.tar.gz"
    if tarball.name != expected:
        raise StepError(f"built {tarball.name}, expected {expected}")
    ctx["tarball"] = tarball
    return f"{tarball.name} ({tarball.stat().st_size} bytes)"


def step_importer(ctx):
    """galaxy-importer on the tarball, read as make importer reads it."""
    if not ctx["importer"]:
        return None
    cfg = ctx["root"] / "galaxy-importer.cfg"
    env = _tool_env(GALAXY_IMPORTER_CONFIG=str(cfg))
    run = subprocess.run(
        [sys.executable, "-m", "galaxy_importer.main", str(ctx["tarball"])],
        cwd=ctx["tarball"].parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    log = run.stdout + run.stderr
    bad = [
        line
        for line in log.splitlines()
        if re.match(r"^(ERROR|CRITICAL|WARNING)", line)
        and not line.startswith("WARNING: Ignore files skip ansible-test sanity tests")
    ]
    if bad or "Importer processing completed successfully" not in log:
        raise StepError("galaxy-importer: " + ("; ".join(bad) or log[-1000:]))
    return "clean"


def pinned_runtime(root=ROOT):
    """requirements.txt's packages at the versions of the test lock (what krops is tested with)."""
    lock = {}
    for line in (root / "requirements-test.txt").read_text(encoding="utf-8").splitlines():
        match = REQUIREMENT.match(line)
        if match and match.group("op") == "==":
            lock[match.group("name").lower()] = match.group("version")
    pinned, missing = [], []
    for line in (root / "requirements.txt").read_text(encoding="utf-8").splitlines():
        match = REQUIREMENT.match(line)
        if not match:
            continue
        name = match.group("name")
        if name.lower() not in lock:
            missing.append(name)
        else:
            pinned.append((name, lock[name.lower()]))
    if missing:
        raise StepError(f"requirements.txt names {', '.join(missing)}, which requirements-test.txt does not pin")
    return pinned


def step_sbom(ctx):
    """CycloneDX SBOM of the collection's Python dependencies (cyclonedx-py requirements)."""
    pinned = pinned_runtime(ctx["root"])
    source = ctx["out"] / "python-requirements.txt"
    source.write_text("".join(f"{name}=={version}\n" for name, version in pinned), encoding="utf-8")
    sbom = ctx["out"] / f"krops-platform-{ctx['version']}.python.cdx.json"
    _run(
        [_sbom_bin(), "requirements", str(source), "--of", "JSON", "--sv", "1.6"]
        + ["--output-reproducible", "--validate", "-o", str(sbom)]
    )
    ctx["sbom"] = sbom
    ctx["pinned"] = pinned
    return f"{sbom.name} ({len(pinned)} components)"


def _install_tools():
    """scripts/install_tools.py, which reads meta/tools.yml the way the image build does."""
    spec = importlib.util.spec_from_file_location("install_tools", ROOT / "scripts" / "install_tools.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def platform_gaps(pins_file, platforms):
    """{platform: [tools]} of the platforms some tool pins no asset for (empty: all can be built), and
    the tools whose digest the build must be given (not confirmed upstream), with their build argument."""
    tools = _install_tools()
    try:
        pins = tools.load_pins(pins_file)
    except tools.ToolError as exc:
        raise StepError(str(exc)) from None
    gaps, unpinned = {}, []
    for platform in platforms:
        lacking = tools.lacking(pins, platform)
        if lacking:
            gaps[platform] = lacking
        arch = platform.split("/")[1]
        for name, pin in pins.items():
            if platform in pin["assets"] and not pin["assets"][platform].get("sha256"):
                unpinned.append(f"{name} {platform} (build argument {tools.env_name(name, arch)})")
    return gaps, unpinned


def step_ee(ctx):
    """The execution environment's build context, and a pinned asset of every tool for every platform."""
    gaps, unpinned = platform_gaps(ctx["root"] / "meta" / "tools.yml", ctx["platforms"])
    if gaps:
        ready = [p for p in ctx["platforms"] if p not in gaps]
        raise StepError(
            "meta/tools.yml pins no asset for "
            + "; ".join(f"{platform}: {', '.join(names)}" for platform, names in gaps.items())
            + ". The image cannot be built for that platform until each of these tools pins its url, sha256 and "
            "checksum_source there (docs/release.md, Platforms)"
            + (f"; or release --platforms {','.join(ready)}" if ready else "")
        )
    if not shutil.which(_bin("ansible-builder")) and not Path(_bin("ansible-builder")).exists():
        raise StepError("ansible-builder is not installed (requirements-test.txt pins it)")
    context = ctx["out"] / "ee" / "context"
    staging = ctx["root"] / "build" / "ee"
    staging.mkdir(parents=True, exist_ok=True)
    shutil.copy(ctx["tarball"], staging / "krops-platform.tar.gz")
    _run(
        [_bin("ansible-builder"), "create", "-f", "execution-environment.yml", "-c", str(context)]
        + ["--output-filename", "Containerfile"],
        cwd=ctx["root"],
    )
    if not (context / "Containerfile").exists():
        raise StepError(f"ansible-builder wrote no Containerfile in {context}")
    given = f"; digests the build is given: {', '.join(unpinned)}" if unpinned else ""
    return f"{context}/Containerfile for {', '.join(ctx['platforms'])} (the image is built by release.yml){given}"


def step_sign(ctx):
    """Checksums and a signature of each artifact (stand-in key here; cosign sign-blob on a tag)."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    artifacts = [ctx["tarball"], ctx["sbom"]]
    sums = ctx["out"] / "SHA256SUMS"
    sums.write_text("".join(f"{_sha256(p)}  {p.name}\n" for p in artifacts), encoding="utf-8")
    key = ec.generate_private_key(ec.SECP256R1())
    public = ctx["out"] / "signer.pub"
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    for path in artifacts + [sums]:
        signature = key.sign(path.read_bytes(), ec.ECDSA(hashes.SHA256()))
        Path(f"{path}.sig").write_bytes(signature)
    return f"{len(artifacts) + 1} signatures, SHA256SUMS (mock signer: ephemeral P-256 key, signer.pub)"


def verify(out, version):
    """What a user checks after download: the checksums, the signatures, the SBOM and the tarball."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    problems = []
    public = serialization.load_pem_public_key((out / "signer.pub").read_bytes())
    sums = out / "SHA256SUMS"
    for path in [sums] + [out / line.split("  ", 1)[1] for line in sums.read_text(encoding="utf-8").splitlines()]:
        if path.name != "SHA256SUMS" and not path.exists():
            path = out / "dist" / path.name
        try:
            public.verify(Path(f"{path}.sig").read_bytes(), path.read_bytes(), ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, FileNotFoundError):
            problems.append(f"{path.name}: signature does not verify")
    for line in sums.read_text(encoding="utf-8").splitlines():
        digest, name = line.split("  ", 1)
        path = out / name if (out / name).exists() else out / "dist" / name
        if not path.exists() or _sha256(path) != digest:
            problems.append(f"{name}: SHA-256 differs from SHA256SUMS")
    sbom = json.loads((out / f"krops-platform-{version}.python.cdx.json").read_text(encoding="utf-8"))
    components = {c["name"].lower(): c.get("version") for c in sbom.get("components", [])}
    for line in (out / "python-requirements.txt").read_text(encoding="utf-8").splitlines():
        name, pinned = line.split("==")
        if components.get(name.lower()) != pinned:
            problems.append(f"SBOM: {name} {components.get(name.lower())} is not the tested {pinned}")
    tarball = out / "dist" / f"krops-platform-{version}.tar.gz"
    with tarfile.open(tarball) as archive:
        for member in archive.getmembers():
            if member.isfile() and AGE_SECRET.search(archive.extractfile(member).read()):
                problems.append(f"{tarball.name}: {member.name} holds an age secret key")
    return problems


def step_verify(ctx):
    problems = verify(ctx["out"], ctx["version"])
    if problems:
        raise StepError("; ".join(problems))
    return "checksums, signatures, SBOM components and tarball content"


STEPS = (
    ("version", step_version),
    ("changelog", step_changelog),
    ("build", step_build),
    ("importer", step_importer),
    ("sbom", step_sbom),
    ("ee-context", step_ee),
    ("sign", step_sign),
    ("verify", step_verify),
)
NEEDS = {
    "changelog": "version",
    "build": "version",
    "importer": "build",
    "sbom": "version",
    "ee-context": "build",
    "sign": "sbom",
    "verify": "sign",
}


def dry_run(out, tag=None, platforms=PLATFORMS, importer=False, root=ROOT, report=print):
    ctx = {"out": out, "tag": tag, "platforms": tuple(platforms), "importer": importer, "root": root}
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, step in STEPS:
        need = NEEDS.get(name)
        if need and results.get(need) != "PASS":
            results[name] = "SKIP"
            report(f"SKIP {name}: {need} did not pass")
            continue
        try:
            detail = step(ctx)
        except StepError as exc:
            results[name] = "FAIL"
            report(f"FAIL {name}: {exc}")
            continue
        if detail is None:
            results[name] = "PASS"
            report(f"SKIP {name}: not asked for (--importer)")
            continue
        results[name] = "PASS"
        report(f"PASS {name}: {detail}")
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True, help="folder for the release artifacts")
    parser.add_argument("--tag", help="the tag being released (default: galaxy.yml's version)")
    parser.add_argument(
        "--platforms",
        default=",".join(PLATFORMS),
        help="image platforms, comma separated (default: %(default)s)",
    )
    parser.add_argument("--importer", action="store_true", help="also run galaxy-importer on the tarball")
    parser.add_argument("--verify-only", action="store_true", help="only verify the artifacts already in --output")
    args = parser.parse_args(argv)
    platforms = [p.strip() for p in args.platforms.split(",") if p.strip()]
    bad = [p for p in platforms if p not in PLATFORMS]
    if bad:
        parser.error(f"unknown platform {bad[0]}: choose from {', '.join(PLATFORMS)}")
    if args.verify_only:
        version = args.tag or galaxy_version()
        problems = verify(args.output, version)
        for problem in problems:
            print(f"FAIL verify: {problem}")
        if not problems:
            print("PASS verify: checksums, signatures, SBOM components and tarball content")
        return 1 if problems else 0
    results = dry_run(args.output, args.tag, platforms, args.importer)
    return 1 if "FAIL" in results.values() else 0


if __name__ == "__main__":
    sys.exit(main())
