use super::*;

fn rec(system: bool, users: &[u32]) -> PromptRecord {
    PromptRecord {
        line: 1,
        system,
        system_bytes: if system { 400 } else { 0 },
        users: users.len() as u16,
        user_bytes: users.to_vec(),
        ..PromptRecord::default()
    }
}

fn shape(system: bool, users: &[u32]) -> PromptShape {
    PromptShape {
        system,
        users: users.len() as u16,
        assistants: 0,
        system_tokens: if system { 100 } else { 0 },
        user_tokens: users.to_vec(),
    }
}

#[test]
fn a_fit_compares_shape_and_bytes_per_token() {
    let f = shape_fit(&rec(true, &[800]), &shape(true, &[200]));
    assert!(f.shape);
    assert_eq!(f.log_ratio, milli(4f64.ln()));
    assert_eq!(f.spread, 0);
    // A missing system prompt is a different shape.
    assert!(!shape_fit(&rec(false, &[800]), &shape(true, &[200])).shape);
    // Another user turn count is a different shape.
    assert!(!shape_fit(&rec(true, &[800, 10]), &shape(true, &[200])).shape);
    // One turn far off the sample's own ratio shows in the spread.
    let f = shape_fit(&rec(true, &[4000]), &shape(true, &[200]));
    assert!(f.spread > 900, "{f:?}");
    // Declared tools are rendered into the system prompt by some templates: not compared.
    let mut r = rec(false, &[800]);
    r.tools_declared = true;
    assert!(shape_fit(&r, &shape(true, &[200])).shape);
}

fn fact(row: u64, record: u32, ratios: [Option<i16>; 7]) -> PairFact {
    let mut fits = [Fit::ABSENT; 7];
    for (f, r) in fits.iter_mut().zip(ratios) {
        if let Some(r) = r {
            *f = Fit {
                absent: false,
                shape: true,
                log_ratio: r,
                spread: 0,
                first_diff: NOT_RENDERED,
            };
        }
    }
    PairFact {
        row,
        set: 0,
        record: Some(record),
        by_id: false,
        fits,
    }
}

/// One prompts file of `records`, paired by line with the corpus's one input of `samples` samples.
pub(super) fn one_file(
    records: Vec<PromptRecord>,
    samples: usize,
    encoder: Option<Arc<dyn RecordEncoder>>,
) -> Pairing {
    Pairing {
        sets: vec![PromptSet {
            path: "prompts.jsonl".into(),
            dir: None,
            category: None,
            records,
            id_field: None,
            by_id: Default::default(),
            duplicate_ids: Vec::new(),
        }],
        source_set: vec![Some(0)],
        first_row: vec![0],
        samples: vec![samples as u64],
        encoder,
        note: None,
    }
}

fn pairing(n: usize) -> Pairing {
    let records = (0..n)
        .map(|i| PromptRecord {
            line: i as u32 + 1,
            ..PromptRecord::default()
        })
        .collect();
    one_file(records, n, None)
}

fn records_of(facts: &[PairFact]) -> Records {
    let mut r = Records::default();
    let c = r.category_index("a");
    for f in facts {
        r.rows.push(crate::records::SampleRecord {
            row: f.row,
            source: 0,
            category: c,
            lengths: Default::default(),
            completion_hash: 0,
            completion_len: 0,
            content: f.row,
            sample_id: None,
            flags: 0,
            features: u32::MAX,
            prompt_hash: 0,
            prompt_len: 0,
            sketch: None,
        });
    }
    r
}

#[test]
fn a_run_that_fits_the_next_record_is_a_shift_and_a_lone_misfit_a_mismatch() {
    let good = 1386; // ln 4
    let bad = 3000;
    let mut facts = Vec::new();
    for row in 0..60u64 {
        // Each sample fits its own record; its neighbours are other prompts, of other sizes.
        let mut r = [Some(bad); 7];
        r[SHIFT_WINDOW] = Some(good);
        if (30..40).contains(&row) {
            // Rows 30..40 fit the record one line further on, not their own.
            r[SHIFT_WINDOW] = Some(bad);
            r[SHIFT_WINDOW + 1] = Some(good);
        }
        if row == 35 {
            // Undecided inside the run (its neighbours look alike): still part of the shift.
            r[SHIFT_WINDOW + 2] = Some(good);
        }
        if row == 50 {
            r = [Some(bad); 7];
        }
        facts.push(fact(row, row as u32, r));
    }
    let (flagged, reports) = resolve(&pairing(64), &facts, &[records_of(&facts)]);
    let rows = |c: Code| {
        flagged
            .iter()
            .filter(|f| f.flags & c.bit() != 0)
            .map(|f| f.row)
            .collect::<Vec<_>>()
    };
    assert_eq!(rows(Code::PromptsShifted), (30..40).collect::<Vec<_>>());
    assert_eq!(rows(Code::PromptMismatch), vec![50]);
    let r = &reports[0];
    assert_eq!((r.paired, r.shifted, r.mismatched), (49, 10, 1));
    assert_eq!(r.shifts.len(), 1);
    assert_eq!(
        (r.shifts[0].offset, r.shifts[0].from_row, r.shifts[0].to_row),
        (1, 30, 39)
    );
    assert_eq!(r.records_without_sample, 4);
    assert_eq!(r.records_without_sample_lines, vec![61, 62, 63, 64]);
    assert_eq!(r.matched_by, "line");
    assert!((r.bytes_per_token.unwrap() - 4.0).abs() < 0.01);
}

#[test]
fn a_correctly_paired_corpus_with_varied_ratios_flags_nothing() {
    // Bytes per token from 3 to 5.5 (prose, code, numbers): all within the band.
    let facts: Vec<PairFact> = (0..200u64)
        .map(|row| {
            let lr = milli((3.0 + 2.5 * ((row * 37 % 100) as f64 / 100.0)).ln());
            fact(row, row as u32, [Some(lr); 7])
        })
        .collect();
    let (flagged, reports) = resolve(&pairing(200), &facts, &[records_of(&facts)]);
    assert!(flagged.is_empty());
    assert_eq!(reports[0].paired, 200);
}

/// A byte table of `pieces` (ids 0..) over 10 ids, with 9 the added token "<s>"; other ids are not text.
fn id_text(pieces: &[&[u8]]) -> IdText {
    let bytes = crate::profile::tokenizer_files::TokenBytes::new(
        10,
        pieces
            .iter()
            .enumerate()
            .map(|(i, b)| (i as u32, b.to_vec())),
    );
    let added = [(9u32, b"<s>".to_vec().into_boxed_slice())]
        .into_iter()
        .collect();
    IdText::new(Arc::new(bytes), added)
}

#[test]
fn prompt_ids_decoding_to_the_rendered_text_match_without_tokenizing() {
    // ids 0..4: "ab", "c", "\n", "abc".
    let t = id_text(&[b"ab", b"c", b"\n", b"abc"]);
    let text = b"<s>abc\n";
    // A stored prompt: all of it, exactly.
    assert!(decodes_to(&t, &[9u32, 0, 1, 2], Some(4), text));
    assert!(decodes_to(&t, &[9u32, 3, 2], Some(3), text)); // other pieces, same text
    assert!(!decodes_to(&t, &[9u32, 0, 1], Some(3), text)); // short
    assert!(!decodes_to(&t, &[9u32, 0, 1, 2, 2], Some(5), text)); // long
    assert!(!decodes_to(&t, &[9u32, 0, 1, 2], Some(9), text)); // prompt length past the sequence
    assert!(!decodes_to(&t, &[0u32, 1, 2], Some(3), text)); // the added token missing

    // One sequence: a prefix that ends on a token boundary.
    assert!(decodes_to(&t, &[9u32, 0, 1, 2, 0, 0], None, text));
    assert!(!decodes_to(&t, &[9u32, 0, 3], None, text)); // "abc" straddles the end of the text
    assert!(!decodes_to(&t, &[9u32, 0, 5, 2], None, text)); // an id that is not text
    assert!(!decodes_to(&t, &[9u32, 0, 1], None, text)); // the sequence ends inside the text
    assert!(!decodes_to(&t, &[] as &[u32], None, b""));
}

#[test]
fn an_added_token_spelled_in_pieces_or_unnormalized_text_is_tokenized_to_decide() {
    // "<s>" is the added token 9; ids 3..6 spell it out as ordinary pieces.
    let t = id_text(&[b"ab", b"c", b"\n", b"<", b"s", b">", "e\u{301}".as_bytes()]);
    assert!(decodes_to(&t, &[9u32, 0, 1], Some(3), b"<s>abc"));
    assert!(!decodes_to(&t, &[3u32, 4, 5, 0, 1], Some(5), b"<s>abc"));
    // Text that NFC would change is never taken as matched by bytes (the normalization check comes with the
    // encoder: without the `prompt` feature there is no IdText to decode with outside tests).
    #[cfg(feature = "prompt")]
    assert!(!decodes_to(
        &t,
        &[0u32, 6],
        Some(2),
        "abe\u{301}".as_bytes()
    ));
}
