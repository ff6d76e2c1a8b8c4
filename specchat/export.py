"""`specchat export`: the command that runs this pair in llama.cpp's own `llama-server` or in vLLM,
with the speculative settings this machine's saved tuning found best. Pure logic: an argv list and
notes come out; the CLI prints them. Nothing is started here and nothing is downloaded.

llama-server's flags are those of the llama.cpp vendored in llama-cpp-python 0.3.36 (`--spec-type`,
`--spec-draft-n-max`; the older `--draft-max` now exits with "the argument has been removed").
vLLM's `--speculative-config` keys are those of its SpeculativeConfig (`method`, `model`,
`num_speculative_tokens`, `prompt_lookup_max`, `prompt_lookup_min`).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import download, modes
from .engineconfig import capped_threads, default_threads
from .errors import ModelFileError, PairError, UsageError
from .exportchoice import Choice, choose, saved_tuning
from .filechecks import require_model_files, require_other_draft
from .registry import load_registry
from .registryentries import ModelSpec

TARGETS = ("llama-server", "vllm")
NGRAM_TYPE = "ngram-mod"  # llama-server's draftless type closest to specchat on edits (docs/bench.md: 1.02x)
VLLM_LOOKUP = (2, 4)  # prompt_lookup_min/max: specchat's prompt lookup matches 1..4 tokens; 1 guesses too often


@dataclass(frozen=True)
class Files:
    """What to serve: local GGUF paths and, for a registry pair, its models (for Hub repos)."""

    target: Path
    draft: Path | None
    pair: str | None = None
    target_spec: ModelSpec | None = None
    draft_spec: ModelSpec | None = None
    packaged: bool = False  # a packaged pair's own target and draft (registryentries.PairSpec.packaged)


@dataclass
class Export:
    to: str
    argv: list[str]
    choice: Choice
    notes: list[str] = field(default_factory=list)

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def as_dict(self) -> dict:
        spec = {"method": self.choice.method, "k": self.choice.k, "why": self.choice.why}
        return {"to": self.to, "command": self.command, "argv": self.argv, "speculation": spec, "notes": self.notes}

    def text(self, as_json: bool) -> str:
        """What goes to stdout: the command on one line (shell-quoted), or the JSON object."""
        return (json.dumps(self.as_dict(), indent=2) if as_json else self.command) + "\n"


def find_files(pair: str | None, target: Path | None, draft: Path | None, *, hub_ok: bool = False,
               draftless: bool = False) -> Files:  # fmt: skip
    """Local files of the pair (never pulled: export only prints), or the files given. hub_ok: a model
    with a source_repo may be missing here (vLLM pulls it from the Hub); its path is where pull puts it.
    draftless (--mode ngram): the command names no draft, so a pair's draft that is not here is left out."""
    require_model_files(target=target, draft=draft)
    # Absolute, not resolved: a link's name is the file's name to run (its tuning is saved under it, and a split
    # model's parts are found by it; the Hugging Face cache's blobs are named by their hashes).
    if target is not None:
        return Files(Path(target).absolute(), Path(draft).absolute() if draft else None)
    spec = load_registry().pair(pair)
    paths = {}
    for role, model in (("target", spec.target), ("draft", spec.draft)):
        found = download.locate(model) if not (role == "draft" and draft) else Path(draft)
        if found is None and hub_ok and model.source_repo:
            found = download.local_path(model)
        if found is None and role == "draft" and draftless:
            return Files(paths["target"], None, spec.name, spec.target, None)
        if found is None and (unmounted := download.broken_link(model)) is not None:  # not "pull it": it is there
            raise unmounted
        if found is None:
            raise ModelFileError(
                f"{model.local_name} ({role} of {spec.name}) is not on this machine",
                hint=f"`specchat pull {spec.name}` first: the command names local files",
            )
        paths[role] = Path(found).absolute()
    # --draft FILE replaces the pair's draft: its Hub repo (what vLLM is told) is another model's.
    return Files(
        paths["target"],
        paths["draft"],
        spec.name,
        spec.target,
        None if draft else spec.draft,
        spec.packaged and not draft,
    )


def llama_server(files: Files, choice: Choice, *, threads: int, ctx: int, gpu_layers: int, draft_gpu_layers: int,
                 port: int = 8080, repack: bool = True, template_kwargs: dict | None = None) -> list[str]:  # fmt: skip
    """llama-server with one slot (one generation at a time, the whole context for it, as `specchat serve`);
    without `repack`, the weights in llama.cpp's plain layout (--no-repack: llama-server cannot keep the repack
    without the AMX layout, as specchat does, weightlayout.py); template_kwargs: --chat-template-kwargs,
    llama-server's flag of that name and JSON."""
    argv = ["llama-server", "-m", str(files.target)]
    if choice.method == "draft":
        argv += ["-md", str(files.draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(choice.k)]
    else:  # ngram-mod's own lengths (48..64 once 24 tokens match); --spec-draft-n-max does not limit it
        argv += ["--spec-type", NGRAM_TYPE]
    argv += ["-t", str(threads), "-c", str(ctx), "-np", "1", *([] if repack else ["--no-repack"])]
    # A negative count (specchat's "all, when it can", as engine.py reads any of them) is llama-server's
    # default "auto": only counts of 0 and more are passed (llama-server reads -2 as "all", others its own way).
    if gpu_layers >= 0:
        argv += ["-ngl", str(gpu_layers)]
    if draft_gpu_layers >= 0 and choice.method == "draft":
        argv += ["-ngld", str(draft_gpu_layers)]
    if files.pair:
        argv += ["--alias", files.pair]  # /v1/models answers with the pair's name, as `specchat serve` does
    if template_kwargs:  # dropped, Qwen3 served by the command thought where specchat serve did not
        argv += ["--chat-template-kwargs", json.dumps(template_kwargs)]
    return [*argv, "--host", "127.0.0.1", "--port", str(port)]


def vllm(files: Files, choice: Choice, *, ctx: int, template_kwargs: dict | None = None) -> tuple[list[str], list[str]]:
    """vllm serve on the pair's original Hub repos where models.toml names them, else the GGUF files."""
    notes = []
    target = _hub_or_file(files.target, files.target_spec, "target", notes)
    if choice.method == "draft":
        draft = _hub_or_file(files.draft, files.draft_spec, "draft", notes)
        config = {"method": "draft_model", "model": draft, "num_speculative_tokens": choice.k}
    else:
        low, high = VLLM_LOOKUP
        config = {"method": "ngram", "num_speculative_tokens": choice.k, "prompt_lookup_max": high,
                  "prompt_lookup_min": low}  # fmt: skip
    argv = ["vllm", "serve", target, "--max-model-len", str(ctx), "--speculative-config", json.dumps(config)]
    if files.pair:
        argv += ["--served-model-name", files.pair]
    if template_kwargs:  # vLLM's name for serve's default variables (a request's chat_template_kwargs go over them)
        argv += ["--default-chat-template-kwargs", json.dumps(template_kwargs)]
        notes.append("--default-chat-template-kwargs is in recent vLLM versions; older ones take them per request only")
    # Said of specchat's own checks (docs/serve.md), not of the machine that runs export: it may have a GPU.
    notes.append(
        "not run by specchat's tests (they had no GPU): the keys follow vLLM's SpeculativeConfig documentation"
    )
    return [*argv, "--host", "127.0.0.1", "--port", "8000"], notes


def _beyond_training(files: Files, choice: Choice, ctx: int, to: str, ctx_default: bool) -> str | None:
    """--ctx past what a model was trained for, as run, serve and bench note it: the command itself cannot say.
    vLLM refuses such a --max-model-len as it starts. A file vLLM takes from the Hub is not here to read."""
    from .ctxsize import beyond_training, trained_context

    draft = files.draft if choice.method == "draft" else None
    present = [path if path is not None and path.is_file() else None for path in (files.target, draft)]
    if present[0] is None or (note := beyond_training(present[0], present[1], ctx, ctx_default)) is None:
        return None
    refused = to == "vllm" and ctx > (trained_context(present[0]) or ctx)  # the target's limit, not the draft's
    return note + ("; vLLM refuses such a --max-model-len as it starts" if refused else "")


def _check_gguf(path: Path) -> None:
    """As run checks a file before llama.cpp loads it (files of a plugin backend are that backend's)."""
    from .backends import LlamaCppBackend, for_path
    from .gguf import check

    if path.is_file() and isinstance(for_path(path), LlamaCppBackend):
        check(path)


def _check_pair(target: Path, draft: Path) -> None:
    """llama-server's own pair check (compat.check_server_pair), on the two files' tokenizers alone."""
    from .compat import check_files, check_server_pair

    report = check_files(target, draft, check_server_pair)
    if report is not None and not report.compatible:
        raise PairError(
            f"llama-server refuses this pair: {report.reason}",
            hint="use a draft of the same model family, or --mode ngram (a command without a draft model)",
        )


def _hub_or_file(path: Path | None, spec: ModelSpec | None, role: str, notes: list[str]) -> str:
    if spec is not None and spec.source_repo:
        return spec.source_repo
    # vLLM gives a draft model the target's tokenizer: --tokenizer is the target's, nothing to add for a draft
    tokenizer = (" and wants the original model's tokenizer: add --tokenizer HUB_REPO" if role == "target"
                 else "; vLLM gives a draft model the target's tokenizer")  # fmt: skip
    notes.append(
        f"the {role} is a local GGUF ({path.name}): vLLM's GGUF support is experimental (single files, "
        f"a plugin in recent versions){tokenizer}"
    )
    return str(path)


def _tuning_only(*, threads: int, gpu_layers: int, draft_gpu_layers: int) -> str:
    """The options given that vLLM's command cannot carry: dropped unsaid, they read as if it used them."""
    given = [f"{name} {value}" for name, value, default in (("--threads", threads, 0), ("--gpu-layers", gpu_layers, -1),
             ("--draft-gpu-layers", draft_gpu_layers, -1)) if value != default]  # fmt: skip
    return ", ".join(given)


def export(to: str, *, pair: str | None = None, target: Path | None = None, draft: Path | None = None,
           mode: str = "auto", k: int | None = None, threads: int = 0, ctx: int = 4096, gpu_layers: int = -1,
           draft_gpu_layers: int = -1, ctx_default: bool = False,
           template_kwargs: dict | None = None) -> Export:  # fmt: skip
    """The command for `to`, with the choice of speculation and every note a user should read;
    template_kwargs: --chat-template-kwargs, carried as each server's own flag."""
    if to not in TARGETS:  # before looking at any file: a typo is a usage error
        raise UsageError(f"unknown --to '{to}'", hint=f"choose one of: {', '.join(TARGETS)}")
    files = find_files(pair, target, draft, hub_ok=to == "vllm", draftless=mode == "ngram")
    if files.draft is not None and mode != "ngram":  # the command names the draft model
        require_other_draft(files.target, files.draft)
    # As run caps them; its tuning is saved under the capped count, so it is looked up under it here.
    given_threads = threads
    threads, capped = capped_threads(threads)
    tuning, none_why = saved_tuning(files, threads=threads, gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers)
    choice = choose(tuning, files.draft is not None, mode, k, none_why)
    used = [(files.target, files.target_spec)] + [(files.draft, files.draft_spec)] * (choice.method == "draft")
    for path, spec in used:  # a file the command names: a truncated or foreign one fails here, as run fails on it
        if to == "llama-server" or spec is None or not spec.source_repo:  # vLLM takes a Hub repo where it has one
            _check_gguf(path)
    # llama-server refuses an incompatible draft as it starts. The packaged pairs' own files are left alone:
    # they are families, and reading two tokenizers doubled what an export takes (about 1 s). vLLM has rules of
    # its own, not checked here.
    if to == "llama-server" and choice.method == "draft" and not files.packaged:
        _check_pair(files.target, files.draft)
    if to == "llama-server":
        if threads <= 0:
            threads = default_threads()
        from .engine import extra_buffers_allowed

        repack = extra_buffers_allowed()
        argv = llama_server(files, choice, threads=threads, ctx=ctx, gpu_layers=gpu_layers,
                            draft_gpu_layers=draft_gpu_layers, repack=repack,
                            template_kwargs=template_kwargs)  # fmt: skip
        notes = [capped] if capped else []
        if not repack:
            notes.append(
                "--no-repack: llama.cpp's AMX layout crashes on Q4_K models here, and llama-server cannot keep its"
                " repack without it as specchat does: its steps run slower (docs/troubleshooting.md)"
            )
        if choice.method == "draft":  # the draftless command has no draft-length flag to rename
            # Those builds know no draft-simple type either (-md alone drafts): renaming one flag still failed.
            notes.append(
                "flags as in the llama.cpp of llama-cpp-python 0.3.36; older llama-server builds (with --draft-max) "
                f"take --draft-max {choice.k} in place of --spec-type draft-simple --spec-draft-n-max {choice.k}"
            )
        if choice.method == "ngram":  # its lengths are a range, not a k: saying k = 8 would be untrue
            if k is not None:
                notes.append(
                    f"-k {k} is not used: {NGRAM_TYPE} drafts 48-64 tokens once 24 match; "
                    "--spec-ngram-mod-n-min and --spec-ngram-mod-n-max set that range"
                )
            choice = replace(choice, k=None)
            if draft_gpu_layers != -1:  # dropped unsaid, it read as if the command used it (vLLM's names its own)
                unused = f"--draft-gpu-layers {draft_gpu_layers} is not used: the command names no draft model"
                notes.append(unused + (" (it only picked a saved tuning)" if mode == "auto" else ""))
    else:
        argv, notes = vllm(files, choice, ctx=ctx, template_kwargs=template_kwargs)
        if given := _tuning_only(threads=given_threads, gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers):
            notes.append(f"{given}: not in vLLM's command, which has no such option (they only pick a saved tuning)")
        if mode == "auto" and choice.method == "ngram" and files.draft is not None:
            notes.append(
                "this choice comes from this machine's costs; on a GPU a draft model usually pays: --mode spec"
            )
    if choice.method == "draft":  # as run says it: a draft model larger than the target cannot save time
        from .pairfiles import larger_draft

        given = (target is not None) + (draft is not None)
        if (swapped := larger_draft(files.target, files.draft, given, files.pair)) is not None:
            notes.append(swapped)
    if (too_long := _beyond_training(files, choice, ctx, to, ctx_default)) is not None:
        notes.append(too_long)
    if pair is not None and target is not None:  # find_files takes the files given: the pair was ignored unsaid
        notes.append(f"--pair {pair} is not used: --target names the files (and --draft FILE a draft model)")
    if draft_note := modes.unused_draft(draft, [mode], f"--mode {mode}", "the command does not name it"):
        notes.append(draft_note)  # dropped unsaid, as --pair was, it read as if the command used it
    method = "draft model" if choice.method == "draft" else (NGRAM_TYPE if to == "llama-server" else "vLLM's ngram")
    return Export(to, argv, choice, [f"speculation: {method}: {choice.why}", *notes])
