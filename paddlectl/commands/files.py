"""The PFS commands: ``cp``, ``ls``, ``mkdir``, ``rm`` and the seeds' ``file``.

Remote paths are absolute (``/pfs/{datacenter}/home/{user}/...``); a trailing slash on one
means a directory. The bytes are moved by ``paddlecloud_client.transfer``.
"""

from __future__ import annotations

import os
from pathlib import Path

from paddlecloud_client import pfspath, transfer
from paddlecloud_client.errors import ApiError, UsageError
from paddlecloud_client.progress import format_size
from paddlectl.args import flag
from paddlectl.output import Column


def _display_name(entry: dict) -> str:
    name = entry["name"]
    if entry.get("type") == "dir":
        return name + "/"
    if entry.get("type") == "link" and entry.get("target"):
        return f"{name} -> {entry['target']}"
    return name


ENTRY_COLUMNS = [Column("type", "type"), Column("size", "size", "size"),
                 Column("modified", "mtime", "time"), Column("name", _display_name)]


# -- ls, mkdir, rm ----------------------------------------------------------------------------

def _remote_paths(ctx, paths: list[str]) -> list[str]:
    """Every path checked before the first request."""
    return [pfspath.require_remote(path, ctx.home) for path in paths]


def setup_ls(parser) -> None:
    flag(parser, "l", dest="long", action="store_true",
         help="a table: type, size, modification time, name")
    flag(parser, "R", "recursive", action="store_true", help="list subdirectories too")
    parser.add_argument("paths", nargs="*", metavar="PATH", help="default: your PFS home")


def run_ls(ctx, args) -> None:
    paths = _remote_paths(ctx, args.paths) or [ctx.home]
    fmt = ctx.output_format(default="table" if args.long else "names")
    if fmt in ("json", "yaml"):
        listings = [ctx.client.pfs_list(path, args.recursive) for path in paths]
        ctx.emit(listings[0] if len(listings) == 1 else listings)
        return
    for index, path in enumerate(paths):
        listing = ctx.client.pfs_list(path, args.recursive)
        entries = sorted(listing["entries"], key=lambda entry: entry["name"])
        if len(paths) > 1:
            ctx.stdout.write(("\n" if index else "") + f"{listing['path']}:\n")
        if fmt == "names":
            ctx.stdout.write("".join(_display_name(entry) + "\n" for entry in entries))
        else:
            ctx.emit(listing, entries, ENTRY_COLUMNS)


def setup_mkdir(parser) -> None:
    flag(parser, "p", "parents", action="store_true",
         help="make parent directories as needed; no error if the directory exists")
    flag(parser, "v", "verbose", action="store_true", help="print each directory made")
    parser.add_argument("paths", nargs="+", metavar="PATH")


def run_mkdir(ctx, args) -> None:
    for path in _remote_paths(ctx, args.paths):
        entry = ctx.client.pfs_mkdir(path, args.parents)
        if args.verbose:
            ctx.info(f"created {entry.get('path', path)}")


def setup_rm(parser) -> None:
    flag(parser, "r", "recursive", action="store_true",
         help="remove directories and their contents")
    flag(parser, "v", "verbose", action="store_true", help="print what was removed")
    parser.add_argument("paths", nargs="+", metavar="PATH")


def run_rm(ctx, args) -> None:
    for path in _remote_paths(ctx, args.paths):
        result = ctx.client.pfs_remove(path, args.recursive)
        if args.verbose:
            ctx.info(f"removed {result.get('path', path)} "
                     f"({format_size(result.get('freed'))} freed)")


# -- moving files -----------------------------------------------------------------------------

def _upload(ctx, local: Path, remote: str, *, parents: bool) -> None:
    """Upload a local file, or the contents of a local directory, to ``remote``."""
    label = local.name or str(local)
    if local.is_dir():
        with ctx.progress(label + "/") as progress:
            transfer.upload_dir(ctx.client, local, remote, progress, ctx.warn, parents=parents)
    else:
        with ctx.progress(label) as progress:
            transfer.upload_file(ctx.client, local, remote, progress, parents=parents)


def _check_source(src: str, recursive: bool) -> Path:
    local = Path(src)
    if not os.path.lexists(local):
        raise UsageError(f"cp: {src}: no such file or directory")
    if local.is_dir() and not recursive:
        raise UsageError(f"cp: {src} is a directory (use -r to copy it)")
    if not (local.is_dir() or local.is_file()):
        raise UsageError(f"cp: {src} is not a regular file or directory")
    return local


def _remote_is_dir(ctx, dest: str, many: bool) -> bool:
    """Whether sources go inside ``dest`` (an existing directory, or one ending in /)."""
    try:
        entry = ctx.client.pfs_stat(pfspath.clean(dest))
    except ApiError as exc:
        if exc.status != 404:
            raise
        entry = None
    if entry is not None and entry.get("type") == "dir":
        return True
    wants_dir = many or dest.endswith("/")
    if entry is not None and wants_dir:
        raise UsageError(f"cp: {dest} is not a directory")
    if entry is None and many and not dest.endswith("/"):
        raise UsageError(f"cp: {dest} does not exist (end it with / to create a directory)")
    return wants_dir


def _upload_all(ctx, sources: list[str], dest: str, recursive: bool) -> None:
    locals_ = [_check_source(src, recursive) for src in sources]
    into = _remote_is_dir(ctx, dest, len(sources) > 1)
    for local in locals_:
        name = Path(os.path.normpath(local)).name
        target = pfspath.join(dest, name) if into and name not in ("", ".", "..") \
            else pfspath.clean(dest)
        _upload(ctx, local, target, parents=dest.endswith("/"))


def _download_all(ctx, sources: list[str], dest_arg: str, recursive: bool) -> None:
    dest = Path(dest_arg)
    make_dir = not dest.is_dir() and dest_arg.endswith(("/", os.sep))
    into = dest.is_dir() or make_dir
    if not into and (len(sources) > 1 or not dest.parent.is_dir()):
        raise UsageError(f"cp: {dest if len(sources) > 1 else dest.parent} is not a directory")
    entries = [(src, ctx.client.pfs_stat(pfspath.clean(src))) for src in sources]
    for src, entry in entries:
        if entry.get("type") == "dir" and not recursive:
            raise UsageError(f"cp: {src} is a directory (use -r to copy it)")
    if make_dir:
        dest.mkdir(parents=True)
    for src, entry in entries:
        name = pfspath.basename(src)
        target = dest / name if into else dest
        remote = pfspath.clean(src)
        if entry.get("type") == "dir":
            if target.exists() and not target.is_dir():
                raise UsageError(f"cp: cannot overwrite {target} (not a directory) "
                                 f"with directory {src}")
            with ctx.progress(name + "/") as progress:
                transfer.download_dir(ctx.client, remote, target, progress, ctx.warn)
        else:
            if target.is_dir():
                raise UsageError(f"cp: cannot overwrite directory {target} with file {src}")
            with ctx.progress(name, entry.get("size")) as progress:
                transfer.download_file(ctx.client, remote, target, progress)


def setup_cp(parser) -> None:
    parser.description = (
        "Upload when DEST is a PFS path, download when the SRCs are. As with cp(1), copying\n"
        "into an existing directory puts the files inside it. A PFS path ending with / is a\n"
        "directory (created if missing).")
    flag(parser, "r", "R", "recursive", action="store_true", help="copy directories")
    parser.add_argument("sources", nargs="+", metavar="SRC")
    parser.add_argument("dest", metavar="DEST")


def run_cp(ctx, args) -> None:
    remote = [pfspath.is_remote(src) for src in args.sources]
    if pfspath.is_remote(args.dest):
        if any(remote):
            raise UsageError("cp: copying from PFS to PFS is not supported yet; "
                             "download and upload again")
        _upload_all(ctx, args.sources, args.dest, args.recursive)
    elif all(remote):
        _download_all(ctx, args.sources, args.dest, args.recursive)
    else:
        raise UsageError("cp: either DEST or every SRC must be a PFS path; PFS paths are "
                         f"absolute and start with /pfs/, e.g. {ctx.home}/")


# -- file: the seeds' upload ------------------------------------------------------------------

FILE_RULES = """\
rules:
  SRC must be inside the current directory (no ../, no absolute path elsewhere).
  SRC ending with / uploads what is in SRC into DEST (no new directory);
  without the slash the directory SRC itself becomes a sub-directory of DEST.
  A file SRC is uploaded into DEST.
  DEST must be inside your home, /pfs/{datacenter}/home/{username}."""


def file_source(src: str, cwd: Path) -> tuple[Path, bool]:
    """``file``'s SRC as a path, and whether only its contents go up (a trailing slash)."""
    contents = src.endswith(("/", os.sep))
    child = "src must be a child of the current directory"
    if ".." in Path(src).parts:
        raise UsageError(f"{child}: {src!r} goes up with '..'")
    local = Path(os.path.normpath(cwd / src))
    if not os.path.lexists(local):
        raise UsageError(f"src {src!r} does not exist")
    real, real_cwd = local.resolve(), cwd.resolve()
    if not real.is_relative_to(real_cwd) or (real == real_cwd and not contents):
        raise UsageError(f"{child} ({real_cwd}); {src!r} is not")
    if contents and not local.is_dir():
        raise UsageError(f"src {src!r} ends with / but is not a directory")
    if not (local.is_dir() or local.is_file()):
        raise UsageError(f"src {src!r} is not a regular file or directory")
    return local, contents


def file_dest(dest: str, home: str) -> str:
    """``file``'s DEST, which must be inside the user's home of the current datacenter."""
    pfspath.require_remote(dest, home)
    if not pfspath.is_inside(dest, home):
        raise UsageError(f"dest must be inside your home {home} (the current datacenter and "
                         f"user); {dest!r} is not")
    return pfspath.clean(dest)


def setup_file(parser) -> None:
    parser.epilog = FILE_RULES
    parser.add_argument("src", metavar="SRC", help="a file or directory here")
    parser.add_argument("dest", metavar="DEST", help="a directory in your PFS home")


def run_file(ctx, args) -> None:
    local, contents = file_source(args.src, Path.cwd())
    dest = file_dest(args.dest, ctx.home)
    target = dest if contents else pfspath.join(dest, local.name)
    _upload(ctx, local, target, parents=True)
