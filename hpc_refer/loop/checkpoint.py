"""HDF5 checkpoints: state trees as files, the checkpoint directory, policy files.

State trees (:data:`~hpc_refer.report.records.StateTree`) map onto HDF5 one to one, with no pickle:
the tree is the group ``/state``; a nested dict is a group, a numpy array a dataset (same
dtype and shape, 0-d included), a scalar an attribute of its group: bool (HDF5 enum, read as
numpy bool), int (int64), float (float64), str (fixed-length UTF-8) and None (an attribute
with an empty dataspace, h5py's ``Empty``). The root carries ``schema_version`` and
``hpc_refer_version`` besides the caller's attributes.

Integrity: files use HDF5's v110+ formats (``libver=("v110", "latest")``), whose metadata
(object headers with their attributes, B-trees, heaps) is checksummed; datasets of more than
:data:`COMPACT_BYTES` are chunked (at most 1 MiB a chunk) with the Fletcher-32 checksum filter,
smaller ones are compact (stored in their checksummed object header). So a truncated file or
a flipped byte makes :func:`read_tree` fail (:class:`CheckpointError` naming the file) rather
than return other numbers; the manifest's SHA-256 (:func:`verify`) covers every byte besides.

Checkpoint directory (ARCHITECTURE.md, "Checkpoint schema")::

    RUN_DIR/checkpoints/step-<env_step:012d>/   one complete checkpoint
        learner-<r>.h5, actor-<e>.h5, run.h5     the parts, one per rank part
        manifest.json                            schema, versions, step, files (size,
                                                 sha256), the caller's meta
    RUN_DIR/checkpoints/.partial-<step:012d>/    parts being written (not a checkpoint)

Publishing is atomic: each part is written to ``NAME.tmp``, fsynced and renamed; the manifest
likewise; then the partial directory is renamed to ``step-...`` and ``checkpoints/`` fsynced.
A directory ``step-...`` with a manifest is therefore complete, whatever was killed when.

The module imports neither mpi4py nor torch: tools that read or write trees, and the
subprocesses of the tests, do without them. Policy files (a policy alone, for evaluation)
are :mod:`hpc_refer.loop.policy_file`'s.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from hpc_refer import __version__
from hpc_refer.report.formats import TreeFormat

if TYPE_CHECKING:
    from hpc_refer.report.records import StateTree

def config_of_the_chosen_algorithm(manifest: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 -> 2 of the manifest: nothing to convert. Schema 2 kept only the chosen
    algorithm's table in ``meta.config`` (build_config reads a config with every table as
    well) and dropped the learner part's ``grad_steps``, an upgrade of the learner's tree
    (:data:`~hpc_refer.loop.learner.LEARNER_FORMAT`)."""
    return dict(manifest)


def clock_and_tree_versions(manifest: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 -> 3 of the manifest: ``meta.wall_s``, the run's clock at the checkpoint,
    where it is absent (written before the clock was stored: 0, the resumed run's clock
    restarts, as it then did). Schema 3 also stamps each owner's tree in the parts with its
    version (:mod:`hpc_refer.report.formats`); a tree without one is version 1."""
    meta = manifest["meta"]
    return {**manifest, "meta": meta if "wall_s" in meta else {**meta, "wall_s": 0.0}}


MANIFEST_FORMAT = TreeFormat("checkpoint manifest",
                             (config_of_the_chosen_algorithm, clock_and_tree_versions),
                             key="schema_version")
"""The manifest's format, whose version is the checkpoint schema (ARCHITECTURE.md,
"Checkpoint schema"): 1 the first; 2 without the learner part's ``grad_steps`` (a duplicate of
``refer/t``) and with only the chosen algorithm's table in the config; 3 with ``meta.wall_s``
and each owner's tree stamped with its version, for the agent lanes and carries that joined
the trees in schema 2 without a bump."""

SCHEMA_VERSION = MANIFEST_FORMAT.version
"""Version of the file layout and of the manifest; a reader refuses newer ones and reads
every older one, through the manifest's and each tree's upgrades."""

STATE_GROUP = "state"
"""The group of a file that holds the state tree."""

COMPACT_BYTES = 16 * 1024
"""Datasets up to this size are stored compact (inside their checksummed object header)."""

CHUNK_BYTES = 1 << 20
"""Largest size of a chunk of the larger datasets, which are cut along their first axis
into equal chunks (each carries a Fletcher-32 sum)."""

LIBVER = ("v110", "latest")
"""HDF5 format bounds: the v110 formats (readable by HDF5 >= 1.10) checksum all metadata."""

MANIFEST = "manifest.json"


class CheckpointError(Exception):
    """A checkpoint is missing, incomplete, corrupt, too new or incompatible; the message
    names the file (or the config keys) and says what is wrong."""


# --- state trees as HDF5 files -------------------------------------------------------------


def write_tree(path: Path, tree: StateTree, attrs: dict[str, Any]) -> None:
    """Write ``tree`` as the group ``/state`` of the HDF5 file ``path``, ``attrs`` (scalars)
    plus ``schema_version`` and ``hpc_refer_version`` as root attributes.

    Atomic: written to ``<name>.tmp`` in the same directory, fsynced, renamed over ``path``,
    and the directory fsynced. A leaf of another type is a TypeError naming its key.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    meta = {**attrs, "schema_version": SCHEMA_VERSION, "hpc_refer_version": __version__}
    try:
        with h5py.File(tmp, "w", libver=LIBVER, track_order=True) as f:
            for key, value in meta.items():
                _write_attr(f.attrs, key, value, f"attribute {key}")
            _write_group(f.create_group(STATE_GROUP, track_order=True), tree, STATE_GROUP)
        _fsync(tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    _fsync(path.parent)


def read_tree(path: Path) -> StateTree:
    """The state tree of a file written by :func:`write_tree` (arrays as numpy arrays,
    scalars as Python bool, int, float, str or None).

    Raises CheckpointError naming the file when it is missing, truncated or corrupt (a
    checksum fails), not an hpc_refer file, or of a newer ``schema_version``.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        with h5py.File(path, "r") as f:
            _check_schema(str(path), f.attrs)
            if STATE_GROUP not in f:
                raise CheckpointError(f"{path}: no /{STATE_GROUP} group: not a state file")
            return _read_group(f[STATE_GROUP], str(path))
    except CheckpointError:
        raise
    except (OSError, KeyError, ValueError, RuntimeError, TypeError) as err:
        raise CheckpointError(f"{path}: truncated or corrupt HDF5 file ({err})") from None


def _check_name(key: Any, where: str) -> None:
    if not isinstance(key, str) or not key or "/" in key or key == ".":
        raise TypeError(f"{where}: key {key!r} is not a valid HDF5 name (a non-empty str "
                        f"without '/')")


def _write_group(group: h5py.Group, tree: StateTree, where: str) -> None:
    for key, value in tree.items():
        _check_name(key, where)
        if isinstance(value, dict):
            _write_group(group.create_group(key, track_order=True), value, f"{where}/{key}")
        elif isinstance(value, np.ndarray):
            _write_dataset(group, key, value, f"{where}/{key}")
        else:
            _write_attr(group.attrs, key, value, f"{where}/{key}")


def _write_dataset(group: h5py.Group, key: str, value: np.ndarray, where: str) -> None:
    """Compact (in the object header) up to COMPACT_BYTES, else chunked with Fletcher-32."""
    if value.dtype.kind not in "biuf":
        raise TypeError(f"{where}: cannot store an array of dtype {value.dtype}")
    arr = value if value.flags.c_contiguous else value.copy()  # (keeps 0-d arrays 0-d)
    if arr.nbytes <= COMPACT_BYTES:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = (h5py.h5s.create(h5py.h5s.SCALAR) if arr.ndim == 0
                 else h5py.h5s.create_simple(arr.shape))
        dataset = h5py.h5d.create(group.id, key.encode(), h5py.h5t.py_create(arr.dtype),
                                  space, dcpl=dcpl)
        if arr.size:
            dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, arr)
        dataset.close()
        return
    n_chunks = -(-arr.nbytes // CHUNK_BYTES)  # equal chunks: the last is padded by < n rows
    chunks = (-(-arr.shape[0] // n_chunks), *arr.shape[1:])
    group.create_dataset(key, data=arr, chunks=chunks, fletcher32=True)


def _write_attr(attrs: h5py.AttributeManager, key: str, value: Any, where: str) -> None:
    if isinstance(value, np.generic):
        value = value.item()
    if value is None:
        attrs.create(key, h5py.Empty("i1"))
    elif isinstance(value, bool):
        attrs.create(key, np.bool_(value))
    elif isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise TypeError(f"{where}: integer {value} does not fit int64")
        attrs.create(key, np.int64(value))
    elif isinstance(value, float):
        attrs.create(key, np.float64(value))
    elif isinstance(value, str):
        raw = value.encode()
        attrs.create(key, np.array(raw), dtype=h5py.string_dtype("utf-8", max(len(raw), 1)))
    else:
        raise TypeError(f"{where}: cannot store a value of type {type(value).__name__}")


def _read_attr(value: Any, where: str) -> Any:
    if isinstance(value, h5py.Empty):
        return None
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode()
    if isinstance(value, str):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise CheckpointError(f"{where}: attribute of unsupported type {type(value).__name__}")


def _read_group(group: h5py.Group, file: str) -> StateTree:
    tree: StateTree = {}
    for key, obj in group.items():
        if isinstance(obj, h5py.Group):
            tree[key] = _read_group(obj, file)
        else:
            tree[key] = np.asarray(obj[()])
    for key, value in group.attrs.items():
        tree[key] = _read_attr(value, f"{file}: {group.name}/{key}")
    return tree


def _check_schema(where: str, attrs: h5py.AttributeManager | dict[str, Any]) -> None:
    if "schema_version" not in attrs:
        raise CheckpointError(f"{where}: no schema_version: not an hpc_refer checkpoint")
    version = int(attrs["schema_version"])
    if version > SCHEMA_VERSION:
        writer = attrs.get("hpc_refer_version", "unknown")
        if isinstance(writer, (bytes, np.bytes_)):
            writer = bytes(writer).decode()
        raise CheckpointError(
            f"{where}: schema_version {version} (written by hpc_refer {writer}) is newer than "
            f"schema_version {SCHEMA_VERSION}, the newest this hpc_refer {__version__} reads"
        )


def _fsync(path: Path) -> None:
    """fsync a file or a directory (its entries: the renames made in it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


# --- the checkpoint directory --------------------------------------------------------------


def _root(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def _complete(root: Path) -> list[tuple[int, Path]]:
    """(step, directory) of every complete checkpoint under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = re.fullmatch(r"step-(\d+)", path.name)
        if match and (path / MANIFEST).is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def partial_dir(run_dir: Path, step: int) -> Path:
    """``RUN_DIR/checkpoints/.partial-<step:012d>/``, created if needed (every rank may call
    it; it is where the parts of the checkpoint of ``step`` are written)."""
    path = _root(run_dir) / f".partial-{step:012d}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def publish(run_dir: Path, step: int, meta: dict[str, Any], keep: int) -> Path:
    """Turn the parts of ``step`` into a complete checkpoint and return its directory.

    One rank calls it once every part is written: stale ``*.tmp`` files of the partial
    directory are removed, the manifest (sizes and SHA-256 of the parts, ``meta``) is
    written to ``manifest.json.tmp``, fsynced and renamed, the directory fsynced and renamed
    to ``step-<step:012d>`` (replacing a checkpoint of the same step), ``checkpoints/``
    fsynced. Then all but the newest ``keep`` complete checkpoints are deleted (each first
    renamed to ``.deleting-...``), with every ``.partial-*`` and ``.deleting-*`` left.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    root = _root(run_dir)
    part = root / f".partial-{step:012d}"
    if not part.is_dir():
        raise CheckpointError(f"{part}: no parts were written for step {step}")
    for stale in part.glob("*.tmp"):
        stale.unlink()
    files = sorted(p for p in part.iterdir() if p.is_file() and p.name != MANIFEST)
    if not files:
        raise CheckpointError(f"{part}: no parts to publish for step {step}")
    manifest = {
        "schema_version": SCHEMA_VERSION, "hpc_refer_version": __version__, "env_step": step,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": [{"name": p.name, "size": p.stat().st_size, "sha256": _sha256(p)}
                  for p in files],
        "meta": meta,
    }
    tmp = part / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    _fsync(tmp)
    os.replace(tmp, part / MANIFEST)
    _fsync(part)
    final = root / f"step-{step:012d}"
    if final.exists():
        replaced = root / f".deleting-{final.name}"
        if replaced.exists():
            shutil.rmtree(replaced)
        os.rename(final, replaced)
    os.rename(part, final)
    _fsync(root)
    for _, old in _complete(root)[:-keep]:
        os.rename(old, root / f".deleting-{old.name}")
    for path in root.iterdir():
        if path.name.startswith((".partial-", ".deleting-")) and path.is_dir():
            shutil.rmtree(path)
    return final


def discard_partials(run_dir: Path) -> None:
    """Delete every ``.partial-*`` directory: on a restart, parts of a checkpoint that was
    never published would otherwise join the next checkpoint of the same step."""
    root = _root(run_dir)
    if root.is_dir():
        for path in root.glob(".partial-*"):
            shutil.rmtree(path)


def latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of ``run_dir`` (largest step with a manifest), or None."""
    complete = _complete(_root(run_dir))
    return complete[-1][1] if complete else None


def verify(ckpt: Path) -> dict[str, Any]:
    """The manifest of the checkpoint directory ``ckpt``, once every file it lists has its
    size and SHA-256; otherwise CheckpointError naming each file that is missing or differs
    (and whether its size or its checksum)."""
    ckpt = Path(ckpt)
    path = ckpt / MANIFEST
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
        _check_schema(str(path), manifest)
        listed = [(e["name"], int(e["size"]), e["sha256"]) for e in manifest["files"]]
    except FileNotFoundError:
        raise CheckpointError(f"{ckpt}: no {MANIFEST}: not a complete checkpoint") from None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{path}: unreadable manifest ({err!r})") from None
    problems = []
    for name, size, digest in listed:
        file = ckpt / name
        if not file.is_file():
            problems.append(f"{file}: listed in the manifest but missing")
        elif (actual := file.stat().st_size) != size:
            problems.append(f"{file}: size {actual} bytes, the manifest says {size}")
        elif _sha256(file) != digest:
            problems.append(f"{file}: sha256 differs from the manifest (same size, {size} "
                            f"bytes: the contents changed)")
    if problems:
        raise CheckpointError("checkpoint does not verify:\n  " + "\n  ".join(problems))
    return manifest


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return out


_ABSENT = object()


def _shown(value: Any) -> str:
    return "(absent)" if value is _ABSENT else json.dumps(value, default=str)


def check_compatible(saved: dict[str, Any], current: dict[str, Any],
                     may_differ: set[str]) -> None:
    """Compare two nested config dicts (``Config.to_dict()`` layout) key by key.

    Keys named in ``may_differ`` (a dotted key such as ``run.steps``, or a whole table such
    as ``run``) are skipped; every other key whose value differs, or that only one side has,
    is listed in one CheckpointError, e.g. ``vracer.hidden: checkpoint [128, 128], now
    [64, 64]``. Tuples compare equal to lists.
    """
    a, b = _flatten(saved), _flatten(current)
    differ = []
    for key in [*b, *(k for k in a if k not in b)]:
        if key in may_differ or any(key.startswith(m + ".") for m in may_differ):
            continue
        old, new = a.get(key, _ABSENT), b.get(key, _ABSENT)
        if old is _ABSENT or new is _ABSENT or old != new:
            differ.append(f"{key}: checkpoint {_shown(old)}, now {_shown(new)}")
    if differ:
        raise CheckpointError("the configuration differs from the checkpoint's in keys that "
                              "may not change on a restart:\n  " + "\n  ".join(differ))


# --- the parts of a run's checkpoint -------------------------------------------------------


def part_attrs(env_id: str, algorithm: str) -> dict[str, Any]:
    """Root attributes of every checkpoint part of a run (for tools reading one file)."""
    return {"env_id": env_id, "algorithm": algorithm}


@dataclass
class Resume:
    """Where a run continues from: a verified checkpoint and its manifest (in the current
    format: :meth:`of`)."""

    path: Path
    manifest: dict[str, Any]

    @classmethod
    def of(cls, path: Path) -> Resume:
        """The checkpoint directory ``path``, verified (:func:`verify`), with its manifest
        upgraded to the current schema (:data:`MANIFEST_FORMAT`)."""
        return cls(path, MANIFEST_FORMAT.upgrade(verify(path)))

    @property
    def learners(self) -> int:
        return int(self.manifest["meta"]["learners"])

    @property
    def envs(self) -> int:
        return int(self.manifest["meta"]["envs"])

    @property
    def elapsed(self) -> float:
        """Seconds of the run at the checkpoint (``meta.wall_s``, the run's clock,
        :mod:`hpc_refer.report.clock`), from which the resumed run's clock continues; 0 for a
        checkpoint written before it was stored (its clock restarts, as it then did: the
        manifest's upgrade, :func:`clock_and_tree_versions`)."""
        return float(self.manifest["meta"]["wall_s"])

    def part(self, name: str) -> StateTree | None:
        """A part of the checkpoint, None when it has none of that name."""
        path = self.path / name
        return read_tree(path) if path.exists() else None
