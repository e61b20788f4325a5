//! A restricted reader of the pickles `torch.save` writes for plain tensors (`data.pkl` of its zip): the
//! protocol-2 opcodes it emits, and only the globals that rebuild a tensor (`torch._utils._rebuild_tensor_v2`,
//! a typed storage class, `collections.OrderedDict`). Nothing is imported and nothing is called: a global is a
//! name, a `REDUCE` of `_rebuild_tensor_v2` becomes a [`Value::Tensor`], and any other global or opcode is
//! refused with the reason. This is how Rust model loaders read PyTorch checkpoints without Python; it is the
//! part of `torch.load(weights_only=True)` a dump of tensors needs.

use super::DType;

/// A value of the pickle as far as tensor dumps need them.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Tuple(Vec<Value>),
    List(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    /// An allowed global, by name (`torch._utils._rebuild_tensor_v2`, `torch.BFloat16Storage`, ...).
    Global(String),
    /// A persistent id `('storage', storage_type, key, location, numel)`: the zip record `data/{key}`.
    Storage {
        key: String,
        dtype: DType,
    },
    /// A tensor view of a storage.
    Tensor {
        key: String,
        dtype: DType,
        offset: u64,
        shape: Vec<u64>,
        stride: Vec<u64>,
    },
    Mark,
}

const REBUILD: &str = "torch._utils._rebuild_tensor_v2";
const ORDERED_DICT: &str = "collections.OrderedDict";

/// The element type a legacy typed-storage class name stands for.
fn storage_dtype(name: &str) -> Option<DType> {
    Some(match name.strip_prefix("torch.")? {
        "BFloat16Storage" => DType::BF16,
        "HalfStorage" => DType::F16,
        "FloatStorage" => DType::F32,
        "DoubleStorage" => DType::F64,
        "LongStorage" => DType::I64,
        "IntStorage" => DType::I32,
        "ShortStorage" => DType::I16,
        "CharStorage" => DType::I8,
        "ByteStorage" => DType::U8,
        "BoolStorage" => DType::Bool,
        _ => return None,
    })
}

/// Most opcodes a pickle may run, and the deepest nesting of its values (a dump of a handful of tensors runs a
/// few hundred opcodes, nested 4 deep).
const MAX_OPS: usize = 1 << 20;
const MAX_DEPTH: u16 = 64;
/// Most values (tensors, numbers, strings, containers) a pickle may hold, memo copies counted: a memo get of a
/// container copies it, so a few bytes could otherwise build an exponential value.
const MAX_CELLS: u64 = 1 << 20;

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end =
            end.ok_or_else(|| format!("the pickle ends inside an opcode at byte {}", self.at))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn line(&mut self) -> Result<String, String> {
        let rest = &self.b[self.at..];
        let n = rest
            .iter()
            .take(256)
            .position(|&c| c == b'\n')
            .ok_or("a GLOBAL name without its end of line")?;
        let s = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.at += n + 1;
        Ok(s)
    }
}

fn as_u64s(v: &Value, what: &str) -> Result<Vec<u64>, String> {
    match v {
        Value::Tuple(x) => x
            .iter()
            .map(|e| match e {
                Value::Int(i) if *i >= 0 => Ok(*i as u64),
                _ => Err(format!("a tensor's {what} is not a tuple of sizes")),
            })
            .collect(),
        _ => Err(format!("a tensor's {what} is not a tuple")),
    }
}

/// `REDUCE` of an allowed callable on its arguments.
fn reduce(f: Value, args: Value) -> Result<Value, String> {
    let Value::Global(name) = f else {
        return Err("REDUCE of a value that is not a global".into());
    };
    let Value::Tuple(args) = args else {
        return Err(format!("REDUCE of {name} without an argument tuple"));
    };
    match name.as_str() {
        ORDERED_DICT if args.is_empty() => Ok(Value::Dict(Vec::new())),
        REBUILD => {
            // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
            let [storage, offset, size, stride, ..] = args.as_slice() else {
                return Err(format!("{REBUILD} with {} arguments", args.len()));
            };
            let Value::Storage { key, dtype } = storage else {
                return Err(format!("{REBUILD} of something that is not a storage"));
            };
            let Value::Int(offset) = offset else {
                return Err("a tensor's storage offset is not an integer".into());
            };
            Ok(Value::Tensor {
                key: key.clone(),
                dtype: *dtype,
                offset: u64::try_from(*offset).map_err(|_| "a negative storage offset")?,
                shape: as_u64s(size, "size")?,
                stride: as_u64s(stride, "stride")?,
            })
        }
        other => Err(format!("REDUCE of {other} (only plain tensors are read)")),
    }
}

/// The value a pickle builds, or why it is refused (an opcode or a global a tensor dump has no use for). Each
/// value on the stack carries how deep it nests, so nesting is bounded without walking values.
pub fn load(b: &[u8]) -> Result<Value, String> {
    let mut r = Reader { b, at: 0 };
    let mut stack: Vec<(Value, u16, u64)> = Vec::new();
    let mut memo: std::collections::HashMap<u32, (Value, u16, u64)> = Default::default();
    let pop = |stack: &mut Vec<(Value, u16, u64)>| {
        stack
            .pop()
            .ok_or_else(|| "the pickle's stack is empty".to_string())
    };
    let pop_mark = |stack: &mut Vec<(Value, u16, u64)>| -> Result<Vec<(Value, u16, u64)>, String> {
        let k = stack
            .iter()
            .rposition(|v| v.0 == Value::Mark)
            .ok_or("no MARK on the pickle's stack")?;
        let items = stack.split_off(k + 1);
        stack.pop();
        Ok(items)
    };
    // A container of `items`: one deeper than the deepest of them.
    type Entry = (Value, u16, u64);
    let nested = |items: Vec<Entry>, make: fn(Vec<Value>) -> Value| -> Result<Entry, String> {
        let d = 1 + items.iter().map(|i| i.1).max().unwrap_or(0);
        if d > MAX_DEPTH {
            return Err("the pickle nests deeper than a tensor dump".into());
        }
        let size = 1 + items.iter().map(|i| i.2).sum::<u64>();
        Ok((make(items.into_iter().map(|i| i.0).collect()), d, size))
    };
    let mut cells = 0u64;
    for _ in 0..MAX_OPS {
        let at = r.at;
        let op = r.u8()?;
        let leaf = |v: Value| (v, 0u16, 1u64);
        // A string weighs a cell per 64 bytes, so that memo copies of a long one are bounded by their bytes.
        let text = |s: &[u8]| {
            (
                Value::Str(String::from_utf8_lossy(s).into_owned()),
                0u16,
                1 + s.len() as u64 / 64,
            )
        };
        match op {
            0x80 => {
                let proto = r.u8()?;
                if proto > 5 {
                    return Err(format!("pickle protocol {proto}"));
                }
            }
            b'.' => return pop(&mut stack).map(|v| v.0),
            b'}' => stack.push((Value::Dict(Vec::new()), 1, 1)),
            b']' => stack.push((Value::List(Vec::new()), 1, 1)),
            b')' => stack.push((Value::Tuple(Vec::new()), 1, 1)),
            b'(' => stack.push(leaf(Value::Mark)),
            b'N' => stack.push(leaf(Value::None)),
            0x88 => stack.push(leaf(Value::Bool(true))),
            0x89 => stack.push(leaf(Value::Bool(false))),
            b'K' => stack.push(leaf(Value::Int(i64::from(r.u8()?)))),
            b'M' => stack.push(leaf(Value::Int(i64::from(r.u16()?)))),
            b'J' => stack.push(leaf(Value::Int(i64::from(r.u32()? as i32)))),
            0x8a => {
                let n = r.u8()? as usize;
                if n > 8 {
                    return Err("an integer wider than 64 bits".into());
                }
                let bytes = r.take(n)?;
                let fill = if bytes.last().is_some_and(|b| b & 0x80 != 0) {
                    0xff
                } else {
                    0
                };
                let mut buf = [fill; 8];
                buf[..n].copy_from_slice(bytes);
                stack.push(leaf(Value::Int(i64::from_le_bytes(buf))));
            }
            b'G' => stack.push(leaf(Value::Float(f64::from_be_bytes(
                r.take(8)?.try_into().expect("8"),
            )))),
            b'X' => {
                let n = r.u32()? as usize;
                let s = r.take(n)?;
                stack.push(text(s));
            }
            0x8c => {
                let n = r.u8()? as usize;
                let s = r.take(n)?;
                stack.push(text(s));
            }
            b'c' => {
                let module = r.line()?;
                let name = r.line()?;
                let full = format!("{module}.{name}");
                if full != REBUILD && full != ORDERED_DICT && storage_dtype(&full).is_none() {
                    return Err(format!(
                        "the global {full} (only plain tensors are read; nothing in the file is run)"
                    ));
                }
                stack.push(leaf(Value::Global(full)));
            }
            b'q' | b'r' | 0x94 => {
                let k = match op {
                    b'q' => u32::from(r.u8()?),
                    b'r' => r.u32()?,
                    _ => memo.len() as u32,
                };
                let top = stack.last().ok_or("a memo put on an empty stack")?;
                // A put copies the value too: counted as a get is.
                cells += top.2;
                if cells > MAX_CELLS {
                    return Err("the pickle holds more values than a tensor dump".into());
                }
                memo.insert(k, top.clone());
            }
            b'h' | b'j' => {
                let k = if op == b'h' {
                    u32::from(r.u8()?)
                } else {
                    r.u32()?
                };
                let v = memo
                    .get(&k)
                    .ok_or(format!("a memo get of {k}, never put"))?;
                cells += v.2;
                if cells > MAX_CELLS {
                    return Err("the pickle holds more values than a tensor dump".into());
                }
                stack.push(v.clone());
            }
            0x95 => {
                r.take(8)?; // FRAME: a length hint
            }
            b't' => {
                let items = pop_mark(&mut stack)?;
                stack.push(nested(items, Value::Tuple)?);
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                if stack.len() < n {
                    return Err("a TUPLE opcode on a short stack".into());
                }
                let items = stack.split_off(stack.len() - n);
                stack.push(nested(items, Value::Tuple)?);
            }
            b'a' | b'e' => {
                let items = if op == b'a' {
                    vec![pop(&mut stack)?]
                } else {
                    pop_mark(&mut stack)?
                };
                let d = 1 + items.iter().map(|i| i.1).max().unwrap_or(0);
                let added: u64 = items.iter().map(|i| i.2).sum();
                match stack.last_mut() {
                    Some((Value::List(l), depth, size)) => {
                        *depth = (*depth).max(d);
                        *size += added;
                        l.extend(items.into_iter().map(|i| i.0));
                    }
                    _ => return Err("APPEND to something that is not a list".into()),
                }
                if d > MAX_DEPTH {
                    return Err("the pickle nests deeper than a tensor dump".into());
                }
            }
            b's' | b'u' => {
                let items = if op == b's' {
                    let v = pop(&mut stack)?;
                    let k = pop(&mut stack)?;
                    vec![k, v]
                } else {
                    pop_mark(&mut stack)?
                };
                if items.len() % 2 != 0 {
                    return Err("SETITEMS with an odd number of values".into());
                }
                let d = 1 + items.iter().map(|i| i.1).max().unwrap_or(0);
                if d > MAX_DEPTH {
                    return Err("the pickle nests deeper than a tensor dump".into());
                }
                let added: u64 = items.iter().map(|i| i.2).sum();
                let Some((Value::Dict(dict), depth, size)) = stack.last_mut() else {
                    return Err("SETITEM on something that is not a dict".into());
                };
                *depth = (*depth).max(d);
                *size += added;
                let mut it = items.into_iter().map(|i| i.0);
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    dict.push((k, v));
                }
            }
            b'Q' => {
                let (pid, _, _) = pop(&mut stack)?;
                let Value::Tuple(t) = pid else {
                    return Err("a persistent id that is not a tuple".into());
                };
                match t.as_slice() {
                    [Value::Str(kind), Value::Global(cls), Value::Str(key), _location, _numel]
                        if kind == "storage" =>
                    {
                        let dtype = storage_dtype(cls).ok_or(format!("a storage of {cls}"))?;
                        stack.push(leaf(Value::Storage {
                            key: key.clone(),
                            dtype,
                        }));
                    }
                    _ => return Err("a persistent id that is not a tensor storage".into()),
                }
            }
            b'R' => {
                let (args, _, _) = pop(&mut stack)?;
                let (f, _, _) = pop(&mut stack)?;
                stack.push(leaf(reduce(f, args)?));
            }
            other => {
                return Err(format!(
                    "the opcode {other:#04x} at byte {at} (only the records torch.save writes for tensors are read)"
                ))
            }
        }
    }
    Err("the pickle runs more opcodes than a tensor dump".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pickle_that_would_run_code_is_refused_without_running_it() {
        // pickle.dumps of `os.system("touch /tmp/x")`, protocol 2, by hand: GLOBAL os system, then REDUCE.
        let evil = b"\x80\x02cos\nsystem\nq\x00X\x0c\x00\x00\x00touch /tmp/xq\x01\x85q\x02Rq\x03.";
        let e = load(evil).unwrap_err();
        assert!(
            e.contains("os.system") && e.contains("nothing in the file is run"),
            "{e}"
        );
        // builtins.eval, and opcodes a tensor dump never holds (BUILD, INST, OBJ, NEWOBJ).
        assert!(load(b"\x80\x02cbuiltins\neval\n.")
            .unwrap_err()
            .contains("builtins.eval"));
        for op in [b'b', b'i', b'o', 0x81] {
            let e = load(&[0x80, 2, op, b'.']).unwrap_err();
            assert!(e.contains("opcode"), "{e}");
        }
        assert!(load(b"\x80\x02}(").unwrap_err().contains("ends"));
        // Nesting and size are bounded without walking values: a million nested tuples, a long list.
        let mut deep = vec![0x80, 2];
        deep.extend(std::iter::repeat_n(b'(', 1_000_000));
        deep.extend(std::iter::repeat_n(b't', 1_000_000));
        assert!(load(&deep).unwrap_err().contains("deeper"));
        let mut long = vec![0x80, 2, b']'];
        for _ in 0..(MAX_OPS / 2) {
            long.extend([b'N', b'a']);
        }
        assert!(load(&long).unwrap_err().contains("more opcodes"));
        // A list memoized and appended to itself again and again doubles each time: bounded by the copies.
        let mut bomb = vec![0x80, 2, b']', b'q', 0];
        for _ in 0..64 {
            bomb.extend([b'h', 0, b'a', b'q', 0]);
        }
        bomb.push(b'.');
        let e = load(&bomb).unwrap_err();
        assert!(e.contains("more values") || e.contains("deeper"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_read_or_refused_never_a_panic(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = load(&b);
        }
    }

    #[test]
    fn a_dict_of_tensors_is_read() {
        // {"x": tensor of 5 int64}, as torch.save writes it (see pickletools.dis of a real file).
        let mut p: Vec<u8> = b"\x80\x02}q\x00(X\x01\x00\x00\x00xq\x01ctorch._utils\n_rebuild_tensor_v2\nq\x02((X\x07\x00\x00\x00storageq\x03ctorch\nLongStorage\nq\x04X\x01\x00\x00\x000q\x05X\x03\x00\x00\x00cpuq\x06K\x05tq\x07QK\x00K\x05\x85q\x08K\x01\x85q\x09\x89ccollections\nOrderedDict\nq\x0a)Rq\x0btq\x0cRq\x0du.".to_vec();
        let v = load(&p).unwrap();
        let Value::Dict(d) = v else { panic!("{v:?}") };
        assert_eq!(d[0].0, Value::Str("x".into()));
        assert_eq!(
            d[0].1,
            Value::Tensor {
                key: "0".into(),
                dtype: DType::I64,
                offset: 0,
                shape: vec![5],
                stride: vec![1]
            }
        );
        p.truncate(p.len() - 1);
        assert!(load(&p).is_err());
    }

    #[test]
    fn memo_copies_of_a_long_string_are_bounded_by_its_bytes() {
        // An 8 MB string memoized, then fetched 2,000 times (16 GB of copies): refused, not allocated.
        let mut p = vec![0x80, 2, b'X'];
        p.extend_from_slice(&(8u32 << 20).to_le_bytes());
        p.extend(std::iter::repeat_n(b'a', 8 << 20));
        p.extend_from_slice(&[b'q', 0]);
        for _ in 0..2000 {
            p.extend_from_slice(&[b'h', 0]);
        }
        p.push(b'.');
        let err = load(&p).unwrap_err();
        assert!(err.contains("more values"), "{err}");
    }
}
