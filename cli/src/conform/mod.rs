//! `kvroute conform` (SPEC.md §16): real KV-aware routers judged through their own
//! wires. Each case is loaded and checked to be policy-neutral ([`case`],
//! [`reference`]), run by the named driver ([`drivers`]) against a fresh router process
//! and stub workers ([`supervise`], [`stub`]), classified ([`outcome`]) and written in
//! the field's report layout ([`report`]).

mod case;
mod drivers;
mod feed;
mod http;
mod outcome;
mod reference;
mod report;
mod stub;
pub(crate) mod supervise;

use crate::failure::Failure;
use kvroute_cli::args::{ConformArgs, ConformRouter};
use std::time::Duration;

/// Runs every case and prints (and, with `--out`, writes) the report; fails with
/// status 1 when a case failed.
pub(crate) fn conform(args: ConformArgs) -> Result<(), Failure> {
    if let Some(out) = &args.out {
        let (out_dir, cases_dir) = (
            std::fs::canonicalize(&**out),
            std::fs::canonicalize(&*args.cases),
        );
        if matches!((out_dir, cases_dir), (Ok(a), Ok(b)) if a == b) {
            return Err(Failure::invalid(vec![format!(
                "{}: --out is the folder of cases; kvroute does not write over its own input",
                out.display()
            )]));
        }
    }
    let cases = case::load_dir(&args.cases, &args.only).map_err(|e| Failure::invalid(vec![e]))?;
    for case in &cases {
        reference::check(case)
            .map_err(|e| Failure::invalid(vec![format!("{}: {e}", case.path.display())]))?;
    }
    if args.router == ConformRouter::Kvroute && !args.command.is_empty() {
        return Err(Failure::invalid(vec![
            "kvroute conform --router kvroute: the reference takes no COMMAND".into(),
        ]));
    }
    if !matches!(args.router, ConformRouter::Kvroute | ConformRouter::Smg)
        && args.command.is_empty()
    {
        return Err(Failure::invalid(vec![format!(
            "kvroute conform --router {}: name the router's command after --",
            drivers::name(args.router)
        )]));
    }
    let bounds = drivers::Bounds {
        settle: Duration::from_millis(args.wait_ms),
        timeout: Duration::from_millis(args.timeout_ms),
    };
    let mut rows = Vec::new();
    let mut logs = Vec::new();
    for case in &cases {
        let placements = reference::answer(case).load_placements;
        let (response, log) = drivers::run(args.router, &args.command, case, &bounds);
        let outcome = outcome::classify(case, &response, &placements);
        let answer = answer_text(&response, &placements);
        crate::out::note(&format!(
            "{}: {} {}",
            case.name,
            outcome.name(),
            outcome.detail()
        ));
        rows.push(report::Row {
            case,
            outcome,
            answer,
        });
        logs.push((case.name.clone(), log));
    }
    write(&args, &rows, &logs)?;
    let (_, _, failed, _) = report::counts(&rows);
    if failed > 0 {
        return Err(Failure::other(format!(
            "kvroute conform: {failed} of {} cases failed",
            rows.len()
        )));
    }
    Ok(())
}

/// What the router answered, for the report: the judged request's answer, and the
/// load requests' workers when they are not where the trace placed them (which skips
/// such a case, SPEC.md §16.3).
fn answer_text(response: &outcome::Response, placements: &[String]) -> String {
    let outcome::Response::Answered {
        answer,
        load_placements,
    } = response
    else {
        return String::new();
    };
    if load_placements.as_slice() == placements {
        return answer.text();
    }
    format!(
        "{}; load requests on {}, placed by the trace on {}",
        answer.text(),
        load_placements.join(","),
        placements.join(",")
    )
}

/// The report on stdout, and the files of `--out`.
fn write(
    args: &ConformArgs,
    rows: &[report::Row],
    logs: &[(String, String)],
) -> Result<(), Failure> {
    let implementation =
        drivers::implementation(args.router, args.router_version.clone(), &args.command);
    let date = utc_now();
    let yaml = report::yaml(&implementation, &date, rows);
    crate::out::print(&yaml)?;
    let Some(dir) = &args.out else { return Ok(()) };
    let command = reproduce_command(args);
    let created = crate::out::CreatedDirs::create(&dir.join("logs"))
        .map_err(|e| Failure::other(format!("{}: {e}", dir.display())))?;
    crate::out::write_file(&dir.join("report.yaml"), |w| w.write_all(yaml.as_bytes()))?;
    let table = report::markdown(&implementation, rows, &command);
    crate::out::write_file(&dir.join("cases.md"), |w| w.write_all(table.as_bytes()))?;
    for (name, log) in logs {
        crate::out::write_file(&dir.join("logs").join(format!("{name}.log")), |w| {
            w.write_all(log.as_bytes())
        })?;
    }
    created.keep();
    Ok(())
}

/// The command line that reproduces the run, for the report's "Reproduce" section.
fn reproduce_command(args: &ConformArgs) -> String {
    let mut words = vec![
        "kvroute".to_string(),
        "conform".into(),
        "--router".into(),
        drivers::name(args.router).into(),
    ];
    if let Some(v) = &args.router_version {
        words.extend(["--router-version".into(), v.clone()]);
    }
    words.extend(["--cases".into(), args.cases.display().to_string()]);
    for name in &args.only {
        words.extend(["--only".into(), name.clone()]);
    }
    if let Some(out) = &args.out {
        words.extend(["--out".into(), out.display().to_string()]);
    }
    if !args.command.is_empty() {
        words.push("--".into());
        words.extend(
            args.command
                .iter()
                .map(|w| w.to_string_lossy().into_owned()),
        );
    }
    words.join(" ")
}

/// The current time as RFC 3339 UTC, from the system clock (the report's `date`).
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    #[test]
    fn days_become_dates() {
        assert_eq!(super::civil_from_days(0), (1970, 1, 1));
        assert_eq!(super::civil_from_days(20_794), (2026, 12, 7));
        assert_eq!(super::civil_from_days(11_016), (2000, 2, 29));
    }
}
