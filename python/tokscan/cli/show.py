"""`tokscan show`: one sample, found without a scan, explained by the core's checker and decoded by segment."""

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

import typer

from .app import (
    CategoryColumnOpt,
    ConfigOpt,
    HiddenLayoutOpt,
    IdColumnOpt,
    IdsColumnOpt,
    JsonOpt,
    MaskColumnOpt,
    OutputColumnOpt,
    ProfileOpt,
    PromptColumnOpt,
    QuietOpt,
    TargetModelOpt,
    TokenizerOpt,
    TrustRemoteCodeOpt,
    app,
    check_hidden_options,
    check_output,
    err,
    out,
    stdout_taken,
    user_errors,
    write_output,
)

SEGMENT_STYLE = {
    "system": "magenta",
    "user": "green",
    "assistant": "blue",
    "tool_declaration": "dark_goldenrod",
    "tool": "yellow",
    "header": "bold white on grey23",
    "prefill": "bold cyan on grey23",
    "thinking": "italic cyan",
    "response": "bright_white",
    "tool_call": "bold yellow",
    "arguments": "yellow",
    "end_of_turn": "bold white on grey23",
    "trailing": "bold red",
    "padding": "dim",
    "other": "dim",
}


def rendering(paired: dict[str, Any], sample: Any, tok: Any, radius: int = 8) -> dict[str, Any]:
    """The core's verdict on a paired record (`_core.paired_record`: rendered and tokenized in the core, compared
    as `scan` compares it), with the first difference decoded on both sides."""
    from ..samples.corpus import decode_text

    if paired["tokens"] == "match":
        return {"status": "match", "rendered_tokens": len(paired["rendered"])}
    if paired["tokens"] == "differ":
        diff, rendered = paired["first_difference"], paired["rendered"]
        a, b = max(0, diff - radius), diff + radius
        return {
            "status": "mismatch",
            "rendered_tokens": len(rendered),
            "first_difference": diff,
            "sample_text": decode_text(tok, sample.ids[a:b].tolist()),
            "rendered_text": decode_text(tok, rendered[a:b]),
        }
    return {"status": "shape", "agrees": paired["shape_agrees"], "why": paired.get("note") or ""}


@app.command()
def show(
    path: Annotated[list[str], typer.Argument(metavar="PATHS", help="The corpus (as given to `tokscan scan`).")],
    sample_id: Annotated[str | None, typer.Option("--sample-id", metavar="ID", help="The sample's id.")] = None,
    row: Annotated[
        int | None, typer.Option(metavar="N", help="The sample's row in scan order (as in the report).")
    ] = None,
    tokenizer: TokenizerOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    prompts: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="prompts.jsonl the samples were generated from: shown and re-rendered."),
    ] = None,
    chat_template: Annotated[
        Path | None, typer.Option(metavar="FILE", help="A Jinja chat template, for tokenizers without one.")
    ] = None,
    profile: ProfileOpt = None,
    config_file: ConfigOpt = None,
    ids_column: IdsColumnOpt = None,
    prompt_column: PromptColumnOpt = None,
    output_column: OutputColumnOpt = None,
    mask_column: MaskColumnOpt = None,
    id_column: IdColumnOpt = None,
    category_column: CategoryColumnOpt = None,
    raw: Annotated[bool, typer.Option(help="Print token ids beside the text.")] = False,
    full: Annotated[
        bool,
        typer.Option(help="Print every token of long segments (paged in a terminal); by default they are elided."),
    ] = False,
    hidden_states: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            help="The hidden-state dump made from the corpus: the sample's file, its tensors and what the checks "
            "find in it (as `scan --hidden-states`).",
        ),
    ] = None,
    hidden_layout: HiddenLayoutOpt = None,
    target_model: TargetModelOpt = None,
    json_out: Annotated[Path | None, JsonOpt("the sample")] = None,
    quiet: QuietOpt = False,
) -> None:
    """Show one sample: its structure, anomalies with positions, and the decoded sequence by segment."""
    from ..api import load_profile
    from ..config import discover, load_file
    from ..errors import UsageError
    from ..outputs import profile_file, refuse_clobbering
    from ..remote import relabel, staged_footers
    from ..samples.corpus import Corpus, describe
    from ..samples.tokenizer import load_tokenizer, read_chat_template
    from .app import corpus_columns

    with user_errors(), ExitStack() as stack:
        if (sample_id is None) == (row is None):
            raise UsageError("give exactly one of --sample-id or --row")
        check_hidden_options(hidden_states, hidden_layout, target_model)
        check_output(json_out, "--json")
        cfg = load_file(config_file) if config_file is not None else discover()
        reads = [
            prompts,
            tokenizer or cfg.tokenizer,
            chat_template,
            profile_file(cfg.profile_name(profile)),
            config_file or cfg.source,
            hidden_states,
            target_model,
        ]
        refuse_clobbering([("--json", json_out)], path, reads)
        columns = corpus_columns(
            config_file, ids_column, prompt_column, output_column, mask_column, id_column, category_column
        )
        tok_dir = tokenizer or cfg.tokenizer
        prof = load_profile(cfg.profile_name(profile), tok_dir, trust_remote_code)
        # An object-store URL: the objects it names are fetched to a temporary directory for the command; for a
        # row, a large Parquet object only its footer and then the row group that holds the row.
        path, bases, sparse = stack.enter_context(staged_footers(list(path), footers=row is not None))
        corpus = Corpus(path, columns)
        if sample_id is not None:
            rows = corpus.rows_of_id(sample_id, 4)
            target = rows[0]
            if len(rows) > 1 and not quiet:
                more = ", ".join(str(r) for r in rows[1:3]) + (" and more" if len(rows) > 3 else "")
                err.print(
                    f"note: sample_id {sample_id!r} is repeated (sample_id_duplicate): showing row {target}, the "
                    f"first; it is also row {more} (--row N shows one)",
                    highlight=False,
                    soft_wrap=True,
                )
        else:
            target = int(row)  # type: ignore[arg-type]
        if sparse and 0 <= target < int(corpus.starts[-1]):  # (out of range: the fetch below says so)
            from .. import _core

            _core.fill_row([str(p) for p in path], target, sparse, dict(corpus.columns))
        sample = corpus.fetch_explained(target, prof)
        tok = load_tokenizer(tok_dir, trust_remote_code) if tok_dir is not None else None
        template = read_chat_template(chat_template) if chat_template is not None else None
        if tok is not None and template is not None:
            tok.chat_template = template
        doc = describe(sample, tok, raw)
        inputs = zip(corpus.inputs, corpus.layouts, strict=True)
        layout = next((lay for (src, _f, _h), lay in inputs if src == sample.source), None)
        # What the core could not check for this sample's input (no mask, no vocabulary): a missing code means
        # nothing then.
        from .. import _core

        doc["not_checked"] = _core.not_checked(prof, [layout] if layout is not None else corpus.layouts)
        # The prompt record, paired as `scan` pairs it (by id, else by line) from `--prompts` or the prompts file
        # beside the sample's shards, and with a tokenizer rendered and compared in the core.
        record, how, check = None, "", None
        found = _core.paired_record(
            [str(p) for p in path],
            prof,
            int(sample.row),
            dict(corpus.columns),
            str(prompts) if prompts is not None else None,
            str(tok_dir) if tok_dir is not None else None,
            template,
        )
        if found is not None:
            paired = json.loads(found)
            if tok_dir is None:
                paired["note"] = "give --tokenizer DIR with a chat template (or --chat-template FILE)"
            if paired["record"]:
                try:
                    record = json.loads(paired["record"])
                except RecursionError:  # the core read it; Python's reader stops at ~1,000 levels
                    raise UsageError(
                        f"{paired['path']} line {paired['line']}: the prompt record is nested too deeply to show"
                    ) from None
                how = f"{paired['path']} line {paired['line']} (paired by {paired['matched_by']})"
                check = rendering(paired, sample, tok)
            else:
                how = f"{paired['path']}: no record pairs with this sample (paired by {paired['matched_by']})"
                check = {"status": "no record"}
            doc["prompt_record"] = {"match": how, "record": record, "rendering": check}
        if hidden_states is not None:
            hidden = (
                str(hidden_states),
                hidden_layout,
                None if target_model is None else str(target_model),
                0,
                _core.AGREEMENT_MIN,
            )
            dump = json.loads(
                _core.hidden_state_sample([str(p) for p in path], prof, int(sample.row), hidden, dict(corpus.columns))
            )
            if dump.get("agreement") and tok is not None:
                for d in dump["agreement"]["disagreements"]:
                    d.append(tok.decode([d[1]]))
                    d.append(tok.decode([d[2]]))
            doc["hidden_states"] = dump
        doc, how = relabel(doc, bases), relabel(how, bases)
        if json_out is not None:
            write_output(json_out, json.dumps(doc, indent=2, ensure_ascii=False))
        if not quiet and not stdout_taken(json_out):
            view = doc if full else {**doc, "segments": describe(sample, tok, raw, elide=True)["segments"]}
            if full and out.is_terminal:
                with out.pager(styles=True):
                    render_sample(view, record, how, check)
            else:
                render_sample(view, record, how, check)


def render_hidden_states(h: dict) -> None:
    """The sample's hidden-state file: its tensors, what the checks found, its next-token agreement."""
    from rich.markup import escape

    if h.get("file") is None:
        out.print(f"[bold]hidden states[/]: [red]no file pairs with this sample[/] ({h['layout']} dump)")
        return
    others = f" (also {', '.join(h['other_files'])})" if h["other_files"] else ""
    out.print(
        f"[bold]hidden states[/]: {escape(h['file'])}{escape(others)} · {h['layout']} · paired by "
        f"{str(h['paired_by']).replace('_', ' ')}",
        highlight=False,
    )
    for t in h["tensors"]:
        out.print(f"  {escape(t['name'])}: {t['dtype']} {t['shape']}", highlight=False)
    if h.get("row_rms") is not None:
        line = f"  last state: median row RMS {h['row_rms']:.3g}"
        if h.get("convention"):
            line += f", stored {h['convention']} the final norm (rms(h / w) {h['unweighted_rms']:.2f})"
        out.print(line, highlight=False)
    for code, text in h["findings"].items():
        out.print(f"  [red]{code}[/]: {escape(text)}", highlight=False)
    a = h.get("agreement")
    if a and a["positions"]:
        out.print(
            f"  next-token agreement: {a['agreed']:,} of {a['positions']:,} completion positions "
            f"({a['agreed'] / a['positions']:.1%})",
            highlight=False,
        )
        for d in a["disagreements"][:10]:
            said = f" {d[3]!r} → predicted {d[4]!r}" if len(d) == 5 else ""
            out.print(
                f"    position {d[0]:,}: token {d[1]} predicted {d[2]}{escape(said)}",
                highlight=False,
            )
    elif not h["findings"]:
        out.print("  [green]no finding[/]")


def render_sample(doc: dict, record: dict | None, how: str, check: dict | None) -> None:
    from rich.panel import Panel
    from rich.text import Text

    from ..report.terminal import CUT_IN

    L = doc["lengths"]
    out.print(
        f"[bold]sample {doc['sample_id'] if doc['sample_id'] is not None else '-'}[/] · row {doc['row']} · "
        f"{doc['source']} · category {doc['category']}",
        highlight=False,
    )
    out.print(
        f"lengths: prompt {L['prompt']} · thinking {L['thinking']} · response {L['response']} · total {L['total']}",
        highlight=False,
    )
    if doc["codes"]:
        for code in doc["codes"]:
            pos = doc["positions"].get(code)
            cut = f" (cut inside {CUT_IN[doc['cut_in']]})" if code == "truncated" and doc.get("cut_in") else ""
            at = "line" if code == "malformed_line" else "token"  # its position is the line's number
            out.print(f"[bold red]{code}[/]" + (f" at {at} {pos}" if pos is not None else "") + cut)
    else:
        out.print("[green]no per-sample anomalies[/] (corpus-wide codes need `tokscan scan`)")
    if doc.get("loss_mask"):
        from ..samples.corpus import mask_line

        colour = "bold red" if "loss_mask_misaligned" in doc["codes"] else "dim"
        out.print(f"[{colour}]{mask_line(doc['loss_mask'])}[/]", highlight=False)
    if doc.get("not_checked"):
        out.print(
            "[dim]not checked for this sample: "
            + "; ".join(f"{c} ({why})" for c, why in doc["not_checked"].items())
            + "[/]",
            highlight=False,
        )
    if doc.get("hidden_states"):
        render_hidden_states(doc["hidden_states"])
    if how:
        out.print(f"prompt record: {how}", highlight=False)
        render_prompt_check(check or {})
        for m in (record or {}).get("messages", []):
            out.print(Panel(str(m.get("content", "")), title=str(m.get("role", "?")), title_align="left"))
    body = Text()
    for seg in doc["segments"]:
        style = SEGMENT_STYLE.get(seg["kind"], "")
        body.append(f"[{seg['kind']} {seg['start']}:{seg['end']}] ", style="dim")
        body.append(seg.get("text", " ".join(map(str, seg.get("ids", [])))), style=style)
        if "ids" in seg and doc.get("decoder") == "tokenizer":
            body.append(f"  {seg['ids']}", style="dim")
        body.append("\n")
    out.print(Panel(body, title="sequence", title_align="left"))
    elided = sum(seg.get("elided", 0) for seg in doc["segments"])
    if elided:
        out.print(f"[dim]{elided:,} tokens of long segments elided; --full shows every token[/]", highlight=False)
    for code, ex in doc["excerpts"].items():
        if "at" in ex:
            line = Text(f"{code} @ {ex['position']}: …")
            line.append(ex["before"])
            line.append(ex["at"] or "∅", style="bold white on red")
            line.append(ex["after"] + "…")
        else:
            line = Text(f"{code} @ {ex['position']}: {ex['ids_before']} [{ex['id_at']}] {ex['ids_after']}")
        out.print(line)


def render_prompt_check(check: dict[str, Any]) -> None:
    status = check.get("status")
    if status == "match":
        out.print(
            f"[bold green]the record re-renders to exactly the sample's prompt[/] ({check['rendered_tokens']} tokens)"
        )
    elif status == "mismatch":
        out.print(
            f"[bold red]the record does NOT match the sample's prompt[/]: first difference at token "
            f"{check['first_difference']} (the record renders {check['rendered_tokens']} tokens)",
            highlight=False,
        )
        out.print(f"  sample:   {check['sample_text']!r}", highlight=False)
        out.print(f"  rendered: {check['rendered_text']!r}", highlight=False)
    elif status == "shape":
        if check["agrees"]:
            out.print(
                "[green]the record's turns agree with the sample's prompt[/] (system prompt, user and assistant turns)"
            )
        else:
            out.print(
                "[bold red]the record's turns disagree with the sample's prompt[/] "
                "(system prompt, user or assistant turns)"
            )
        out.print(f"[dim]tokens not compared: {check['why']}[/]", highlight=False)
    elif status == "no record":
        out.print("[bold red]no prompt record pairs with this sample[/]")
