//! `kvroute-peer-dynamo [--positional]`: NVIDIA Dynamo's `RadixTree` (or, with
//! `--positional`, its `PositionalIndexer`) as a `kvroute-peer/1` peer on stdin and
//! stdout (SPEC.md §15), for `kvroute peer run TRACE -- kvroute-peer-dynamo`. Its
//! answers equal the in-process comparison's wherever a key's first occurrence fixes
//! its chain position (see `kvroute_peers::stream`): the proof that the protocol loses
//! nothing.

use kvroute_peers::dynamo::DynamoKind;
use std::io::{BufReader, BufWriter};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind = match args.as_slice() {
        [] => DynamoKind::RadixTree,
        [flag] if flag == "--positional" => DynamoKind::Positional,
        _ => {
            eprintln!("usage: kvroute-peer-dynamo [--positional]");
            std::process::exit(2);
        }
    };
    let input = BufReader::new(std::io::stdin().lock());
    let output = BufWriter::new(std::io::stdout().lock());
    std::process::exit(kvroute_peers::stream::serve(kind, input, output));
}
