"""`qlora-app push`: export into a temporary folder, then huggingface_hub's create_repo + upload_folder of it.

What is uploaded is exactly what `export` writes (model card included). `--local-only` (or HF_HUB_OFFLINE) and a
missing token are refused before anything is exported.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from app.errors import UserError
from app.export.bundle import export_run

PUSH_FORMATS = ("adapter", "merged", "gguf", "gguf-lora")
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")


def push_run(run, repo: str, fmt: str = "adapter", outtype: str | None = None, private: bool = False,
             dry_run: bool = False, local_only: bool = False) -> dict:
    """{repo, files: [(name, bytes)], url}: what was (or, with dry_run, would be) uploaded. A dry run needs no
    network and no token: it exports from local files and lists them."""
    from huggingface_hub import HfApi, constants, get_token

    if fmt not in PUSH_FORMATS:
        raise UserError(f"--format {fmt} is not one of {', '.join(PUSH_FORMATS)} for push")
    if not _REPO.match(repo or ""):
        raise UserError(f"--repo {repo!r} is not a hub repository id; pass OWNER/NAME, e.g. you/my-model")
    offline = local_only or constants.HF_HUB_OFFLINE
    if offline and not dry_run:
        raise UserError("push uploads to the Hugging Face Hub, and this is an offline session (--local-only or "
                        "HF_HUB_OFFLINE); push from a connected machine")
    token = get_token()
    if not dry_run and not token:
        raise UserError("no Hugging Face token found; run `hf auth login` (or set HF_TOKEN) and push again")
    with tempfile.TemporaryDirectory(prefix="qlora-app-push-") as tmp:
        res = export_run(run, Path(tmp) / "export", fmt=fmt, outtype=outtype, local_only=bool(offline))
        files = sorted((str(p.relative_to(res.out)), p.stat().st_size) for p in res.out.rglob("*") if p.is_file())
        if dry_run:
            return {"repo": repo, "files": files, "url": None}
        api = HfApi(token=token)
        try:
            url = api.create_repo(repo, private=private, exist_ok=True)
            api.upload_folder(repo_id=repo, folder_path=res.out,
                              commit_message=f"qlora-app push: {fmt} of {Path(str(run)).name}")
        except Exception as e:  # noqa: BLE001 - auth, network, a repo owned by someone else: one line
            detail = (str(e).strip().splitlines() or [""])[0][:200]
            raise UserError(f"could not upload to {repo} ({type(e).__name__}: {detail}); check the token's write "
                            "access and the network") from None
    return {"repo": repo, "files": files, "url": str(url)}
