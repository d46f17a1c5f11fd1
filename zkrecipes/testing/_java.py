"""Compiling a small Java worker against Debian's Curator jars, once, into a cache (used by the interop
tests, the safety lab's mixed-curator trial and the contention benchmark)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional, Tuple

CURATOR_JARS = ("curator-recipes", "curator-framework", "curator-client", "zookeeper", "zookeeper-jute", "guava",
                "slf4j-api", "slf4j-nop")


def curator_classpath(source: Path, java_dir: str = "/usr/share/java") -> Tuple[Optional[str], str]:
    """``(classpath, "")`` with ``source`` compiled into a cache dir keyed by its text and the jars, or
    ``(None, why not)`` when there is no JDK or no Curator here; raises RuntimeError if javac fails."""
    javac, java = shutil.which("javac"), shutil.which("java")
    if not javac or not java:
        return None, "no JDK (javac/java) on PATH; on Debian: apt-get install default-jdk-headless"
    jars = [os.path.join(java_dir, f"{j}.jar") for j in CURATOR_JARS]
    missing = [j for j in jars if not os.path.exists(j)]
    if missing:
        return None, f"Curator jars missing ({', '.join(missing)}); on Debian: apt-get install libcurator-recipes-java"
    digest = hashlib.sha256(source.read_bytes() + ":".join(jars).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "zkrecipes-java" / digest
    if not (cache / f"{source.stem}.class").exists():
        tmp = Path(tempfile.mkdtemp(prefix=f"{source.stem}-"))
        proc = subprocess.run([javac, "-d", str(tmp), "-cp", ":".join(jars), str(source)],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"javac failed on {source}:\n{proc.stderr}")
        cache.parent.mkdir(parents=True, exist_ok=True)
        try:
            tmp.rename(cache)
        except OSError:  # compiled meanwhile by another run
            shutil.rmtree(tmp, ignore_errors=True)
    return ":".join([str(cache)] + jars), ""
