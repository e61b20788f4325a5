"""`tokscan align`: is every sample's prompt exactly the chat-template rendering of its prompt record? The core
pairs, renders, tokenizes and compares (the scan's pairing, `scan --prompts FILE --tokenizer DIR`); this command
prints that verdict alone, with the first differences decoded."""

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from .app import (
    CategoryColumnOpt,
    ConfigOpt,
    IdColumnOpt,
    IdsColumnOpt,
    JsonOpt,
    MaskColumnOpt,
    OutputColumnOpt,
    ProfileOpt,
    PromptColumnOpt,
    QuietOpt,
    TrustRemoteCodeOpt,
    app,
    check_output,
    corpus_columns,
    out,
    stdout_taken,
    user_errors,
    write_output,
)

#: The pairing codes: a sample without its record, a record that is not the sample's prompt, a shifted file.
PAIRING_CODES = ("prompt_missing", "prompt_mismatch", "prompts_shifted", "prompt_unrenderable")
#: Mismatches decoded into the result (every mismatched row is listed in `mismatched_rows`).
DECODED = 10


def _matched_by(entry: dict[str, Any]) -> str:
    if entry["matched_by"] == "id":
        return f"the records' {entry.get('id_field')!r} field against each sample_id"
    return "line number (record N is sample N; the records have no id field)"


def _shift_message(s: dict[str, Any], report: Any) -> str:
    first = next((f for f in report.flagged if f["row"] == s["from_row"]), None)
    who = first["sample_id"] if first and first.get("sample_id") is not None else f"row {s['from_row']}"
    return (
        f"prompt rows are shifted by {s['offset']:+d} from sample {who} on ({s['samples']:,} samples, rows "
        f"{s['from_row']}-{s['to_row']}): the prompts file is shifted or reordered"
    )


@app.command()
def align(
    path: Annotated[list[str], typer.Argument(metavar="PATHS", help="The corpus (as given to `tokscan scan`).")],
    prompts: Annotated[
        Path, typer.Option(metavar="FILE", help='prompts.jsonl: one {"messages": [...], "tools": ...} per line.')
    ],
    tokenizer: Annotated[
        Path,
        typer.Option(
            metavar="DIR",
            help="Tokenizer directory (its chat template: tokenizer_config.json or chat_template.jinja).",
        ),
    ],
    chat_template: Annotated[
        Path | None, typer.Option(metavar="FILE", help="A Jinja chat template file, for tokenizers without one.")
    ] = None,
    profile: ProfileOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    json_out: Annotated[Path | None, JsonOpt("the result")] = None,
    quiet: QuietOpt = False,
    config_file: ConfigOpt = None,
    ids_column: IdsColumnOpt = None,
    prompt_column: PromptColumnOpt = None,
    output_column: OutputColumnOpt = None,
    mask_column: MaskColumnOpt = None,
    id_column: IdColumnOpt = None,
    category_column: CategoryColumnOpt = None,
) -> None:
    """Check that every sample's prompt is exactly the chat-template rendering of its prompt record."""
    from .. import _core
    from ..api import load_profile
    from ..api import scan as run_scan
    from ..config import discover, load_file
    from ..errors import UsageError
    from ..outputs import profile_file, refuse_clobbering
    from ..samples.corpus import decode_text
    from ..samples.tokenizer import load_tokenizer, read_chat_template

    with user_errors():
        check_output(json_out, "--json")
        cfg = load_file(config_file) if config_file is not None else discover()
        reads = [prompts, tokenizer, chat_template, profile_file(cfg.profile_name(profile)), config_file or cfg.source]
        refuse_clobbering([("--json", json_out)], path, reads)
        columns = corpus_columns(
            config_file, ids_column, prompt_column, output_column, mask_column, id_column, category_column
        )
        if not prompts.is_file():
            raise UsageError(f"{prompts}: no such prompts file")
        tok = load_tokenizer(tokenizer, trust_remote_code)  # decodes the differences; refuses remote code unasked
        template = read_chat_template(chat_template) if chat_template is not None else None
        prof = load_profile(cfg.profile_name(profile), None, trust_remote_code)
        report = run_scan(
            path,
            prof,
            tokenizer=tokenizer,
            columns=columns,
            prompts=prompts,
            chat_template=chat_template,
            trust_remote_code=trust_remote_code,
        )
        entries = report.data.get("pairing") or []
        if not entries:
            raise UsageError(f"{prompts}: no sample of the corpus pairs with it")
        if any(e["compared"] != "tokens" for e in entries):
            why = next((e.get("note") for e in entries if e.get("note")), None) or "the records were not rendered"
            # The core's note names the tokenizer directory when that is where it failed.
            where = "" if str(tokenizer) in why else f"{tokenizer}: "
            raise UsageError(f"{where}{why} (give --chat-template FILE for a tokenizer without one)")
        entry = entries[0]
        codes = ("prompt_mismatch", "prompts_shifted", "prompt_unrenderable")
        rows = sorted({r for code in codes for r in report.flagged_rows(code)})
        missing = report.flagged_rows("prompt_missing")
        by_row = {f["row"]: f for f in report.flagged}
        mismatches = []
        corpus = _core.Corpus([str(p) for p in path], dict(columns))
        for row in rows[:DECODED]:
            found = _core.paired_record(
                [str(p) for p in path], prof, row, dict(columns), str(prompts), str(tokenizer), template
            )
            paired = json.loads(found) if found is not None else {}
            sample = corpus.sample(row)
            diff = paired.get("first_difference")
            rendered = paired.get("rendered") or []
            a, b = max(0, (diff or 0) - 8), (diff or 0) + 8
            entry_of_row = {
                "row": row,
                "sample_id": by_row[row]["sample_id"] if row in by_row else None,
                "record": paired.get("line"),
                "first_difference": diff,
                "sample_text": decode_text(tok, list(sample["ids"][a:b])),
                "rendered_text": decode_text(tok, rendered[a:b]),
            }
            if "prompt_unrenderable" in (by_row.get(row) or {}).get("codes", ()):
                # The template's own message (`raise_exception`), not a difference at no token.
                entry_of_row["render_error"] = paired.get("note") or "the chat template failed"
            mismatches.append(entry_of_row)
        shifts = [{**s, "message": _shift_message(s, report)} for e in entries for s in e["shifts"]]
        counts = {c: report.count(c) for c in PAIRING_CODES}
        ok = not any(counts.values())
        result = {
            "n_samples": report.n_samples,
            "n_records": sum(e["records"] for e in entries),
            "matched_by": _matched_by(entry),
            "aligned": sum(e["paired"] for e in entries),
            "mismatched": counts["prompt_mismatch"],
            "shifted": counts["prompts_shifted"],
            "unrenderable": counts["prompt_unrenderable"],
            "missing": missing,
            "mismatched_rows": rows,
            "mismatches": mismatches,
            "shifts": shifts,
            "ok": ok,
        }
        if json_out is not None:
            write_output(json_out, json.dumps(result, indent=2, ensure_ascii=False))
        if not quiet and not stdout_taken(json_out):
            out.print(f"{result['n_samples']:,} samples, {result['n_records']:,} prompt records, matched by "
                      f"{result['matched_by']}", highlight=False)  # fmt: skip
            out.print(
                f"aligned: {result['aligned']:,} · mismatched: {len(rows):,} · without a record: {len(missing):,}",
                highlight=False,
            )
            for s in shifts:
                out.print(f"[bold red]{s['message']}[/]", highlight=False)
            for m in mismatches:
                who = m["sample_id"] if m["sample_id"] is not None else f"#{m['row']}"
                if "render_error" in m:
                    out.print(
                        f"[bold]{who}[/]: the chat template failed on record line {m['record']}: {m['render_error']}",
                        highlight=False,
                    )
                    continue
                out.print(
                    f"[bold]{who}[/] differs from record line {m['record']} at token {m['first_difference']}:",
                    highlight=False,
                )
                out.print(f"  sample:   {m['sample_text']!r}", highlight=False)
                out.print(f"  rendered: {m['rendered_text']!r}", highlight=False)
            if len(rows) > len(mismatches):
                out.print(f"… and {len(rows) - len(mismatches):,} more (every row: --json FILE, `mismatched_rows`)")
            out.print("[bold green]ALIGNED[/]" if ok else "[bold red]MISALIGNED[/]")
    raise typer.Exit(0 if ok else 1)
