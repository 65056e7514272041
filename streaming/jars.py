"""The jars faultline runs beside pyspark's own, named once in ``conf/jars/pom.xml`` (one Maven
profile per set), fetched by ``faultline jars fetch`` into a cache outside the repository and
found there without network.

The cache is ``$FAULTLINE_JARS``, else ``$XDG_CACHE_HOME/faultline/jars``, else
``~/.cache/faultline/jars``. A set lives in a folder named after it and a digest of the manifest,
so a changed manifest is fetched again rather than mixed with what an older one fetched (which
then goes: the cache holds one folder per set). The folder appears whole (fetched beside it,
then renamed) or not at all. Jars that pyspark already ships are left out of the sets Spark
loads, so that one class never comes from two versions.

Every JVM faultline starts (a Spark session, a Kafka broker) notes itself with
:func:`note_jvm_start`, for the test suite's budget.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from streaming.config import CONF_DIR
from udfs.errors import ConfigError

MANIFEST = CONF_DIR / "jars" / "pom.xml"
FETCH = "faultline jars fetch"
"""The command that fetches every set (the errors name it)."""
SPARK_SETS = ("spark-kafka", "delta")
"""The sets a Spark session loads (``spark.jars``); the others run in JVMs of their own."""
_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def cache() -> Path:
    if os.environ.get("FAULTLINE_JARS"):
        return Path(os.environ["FAULTLINE_JARS"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "faultline" / "jars"


def _pom() -> ET.Element:
    return ET.parse(MANIFEST).getroot()


def sets() -> list[str]:
    """The manifest's sets, in its order."""
    return [p.findtext("m:id", namespaces=_NS) or "" for p in _pom().iterfind(".//m:profile", _NS)]


def version(name: str) -> str:
    """A version the manifest sets, e.g. ``version("kafka")`` for ``kafka.version``."""
    value = _pom().findtext(f"m:properties/m:{name}.version", namespaces=_NS)
    if value is None:
        raise KeyError(name)
    return value


def digest(files: list[Path]) -> str:
    """A short digest of the files' contents: a cache folder's name changes with them."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def folder(name: str) -> Path:
    """Where the set ``name`` lives once fetched."""
    return cache() / f"{name}-{digest([MANIFEST])}"


def find(name: str, needed_for: str) -> list[Path]:
    """The jars of the set ``name``; a :class:`ConfigError` naming :data:`FETCH` when it has not
    been fetched (``needed_for`` says which setting needs it)."""
    if name not in sets():
        raise KeyError(name)
    where = folder(name)
    if not where.is_dir():
        raise ConfigError(
            f"{needed_for} needs the jar set '{name}' (conf/jars/pom.xml), not found under "
            f"{cache()}: fetch it once with `{FETCH} {name}` (Maven, from Maven Central), "
            "or point FAULTLINE_JARS at a folder where it was fetched"
        )
    return sorted(where.glob("*.jar"))


def _check_spark() -> None:
    import pyspark

    wanted = version("spark")
    if pyspark.__version__ != wanted:
        raise ConfigError(
            f"{MANIFEST}: spark.version {wanted} is not this pyspark ({pyspark.__version__}); "
            "the Spark sets must be built for the Spark that runs them"
        )


def _pyspark_artifacts() -> set[str]:
    """The artifact names of the jars pyspark ships (``jackson-core`` of
    ``jackson-core-2.18.2.jar``)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return {_artifact(j.name) for j in jars.glob("*.jar")}


def _artifact(filename: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``: the name up to its first part that
    starts with a digit."""
    parts = filename.removesuffix(".jar").split("-")
    for i, part in enumerate(parts[1:], 1):
        if part[:1].isdigit():
            return "-".join(parts[:i])
    return "-".join(parts)


def known(names: list[str] | None) -> list[str]:
    """``names`` (default: every set), each checked to be a set of the manifest."""
    unknown = [n for n in names or () if n not in sets()]
    if unknown:
        raise ConfigError(f"no jar set {', '.join(unknown)}; the sets are: {', '.join(sets())}")
    return names or sets()


def fetch(names: list[str] | None = None, out: TextIO | None = None) -> list[Path]:
    """Fetch the sets ``names`` (default: all) that are not in the cache yet; their folders."""
    wanted = known(names)
    if any(n in SPARK_SETS for n in wanted):
        _check_spark()
    mvn = shutil.which("mvn")
    done = []
    for name in wanted:
        target = folder(name)
        if not target.is_dir():
            if mvn is None:
                raise ConfigError(f"{FETCH} needs Maven (mvn) on the PATH")
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}-") as tmp:
                _copy(mvn, name, Path(tmp) / "jars")
                os.replace(Path(tmp) / "jars", target)
            for older in target.parent.glob(f"{name}-*"):  # an older manifest's: the cache's bound
                if older != target:
                    shutil.rmtree(older, ignore_errors=True)
            if out is not None:
                count = len(list(target.glob("*.jar")))
                print(f"faultline: fetched {name}: {count} jars in {target}", file=out)
        done.append(target)
    return done


def _copy(mvn: str, name: str, into: Path) -> None:
    cmd = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(MANIFEST),
        "-P",
        name,
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={into}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise ConfigError(f"{FETCH} {name}: Maven failed ({' '.join(cmd)}):\n{tail}")
    if name in SPARK_SETS:
        ships = _pyspark_artifacts()
        for jar in into.glob("*.jar"):
            if _artifact(jar.name) in ships:
                jar.unlink()


def maven_built(
    name: str,
    pom: Path,
    build_property: str,
    goals: Sequence[str],
    keep: Callable[[Path, Path], None],
) -> Path:
    """A folder of the cache, ``<name>-<digest>``, built by Maven from the module of ``pom`` when
    its sources (the POM and every file under ``src/``) changed: ``mvn -q -B -f POM GOALS
    -D<build_property>=BUILD`` with a temporary ``BUILD`` (the module's ``<directory>``: nothing is
    built into the repository), then ``keep(BUILD, folder)`` moves what is kept into the new
    folder, which appears whole. An older build of ``name`` goes."""
    sources = [pom, *sorted(p for p in (pom.parent / "src").rglob("*") if p.is_file())]
    target = cache() / f"{name}-{digest(sources)}"
    if target.is_dir():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(f"building {pom.parent} needs Maven (mvn) on the PATH")
    cache().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache(), prefix=f".{name}-") as tmp:
        build, out = Path(tmp, "build"), Path(tmp, "out")
        out.mkdir()
        note_jvm_start(f"maven {name}")
        cmd = [mvn, "-q", "-B", "-f", str(pom), *goals, f"-D{build_property}={build}"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"building {pom.parent} failed:\n{done.stdout}{done.stderr}")
        keep(build, out)
        with contextlib.suppress(OSError):  # built meanwhile by another process
            os.replace(out, target)
    for older in cache().glob(f"{name}-*"):
        if older != target:
            shutil.rmtree(older, ignore_errors=True)
    return target


JVM_LOG = "FAULTLINE_JVM_LOG"
"""When set, a file to which each Spark session this process starts appends one line: the test
that started it (``PYTEST_CURRENT_TEST``) and the process. The test suite counts them against its
budget of JVM starts (``tests/budget.py``)."""


def note_jvm_start(what: str = "spark session") -> None:
    """One line in :data:`JVM_LOG`, if set, for a JVM this process is about to start."""
    log = os.environ.get(JVM_LOG)
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '-')}\t{os.getpid()}\t{what}\n")


def rolling_log(log: Path, level: str, pattern: str, mb: int, files: int) -> str:
    """A JVM's log4j2 configuration: everything at ``level`` and above into ``log``, rolled over
    at ``mb`` MB and kept to ``files`` files (a JVM that runs for months must not fill a disk)."""
    return (
        f"rootLogger.level = {level}\n"
        "rootLogger.appenderRef.file.ref = file\n"
        "appender.file.type = RollingFile\n"
        "appender.file.name = file\n"
        f"appender.file.fileName = {log}\n"
        f"appender.file.filePattern = {log}.%i\n"
        "appender.file.layout.type = PatternLayout\n"
        f"appender.file.layout.pattern = {pattern}\n"
        "appender.file.policies.type = Policies\n"
        "appender.file.policies.size.type = SizeBasedTriggeringPolicy\n"
        f"appender.file.policies.size.size = {mb}MB\n"
        "appender.file.strategy.type = DefaultRolloverStrategy\n"
        f"appender.file.strategy.max = {files - 1}\n"
    )
