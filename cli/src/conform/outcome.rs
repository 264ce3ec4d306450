//! A case's outcome (SPEC.md §16.3): `pass`, `tie`, `fail` with a cause, or `skipped`
//! with a reason, from the router's answer and the case.

use super::case::{Answer, Case};

/// How one case ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Tie,
    Fail { cause: String },
    Skipped { reason: String },
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Tie => "tie",
            Outcome::Fail { .. } => "fail",
            Outcome::Skipped { .. } => "skipped",
        }
    }

    /// The cause of a failure or the reason of a skip; empty otherwise.
    pub fn detail(&self) -> &str {
        match self {
            Outcome::Fail { cause } => cause,
            Outcome::Skipped { reason } => reason,
            _ => "",
        }
    }
}

/// What a driver made of a case.
#[derive(Debug, Clone)]
pub enum Response {
    /// The router's answer to the judged request, and where it placed the load
    /// requests (in order).
    Answered {
        answer: Answer,
        load_placements: Vec<String>,
    },
    /// The router gave no answer within the bounds: the error, quoted.
    NoAnswer(String),
    /// The driver cannot express the case for this router.
    Skipped(String),
}

/// The outcome of `response` to `case`, where `placements` are where kvroute's replay
/// put the load requests (SPEC.md §16.2: a load request sent elsewhere means its
/// prefix was ignored, so the judged request would not test what it tests).
pub fn classify(case: &Case, response: &Response, placements: &[String]) -> Outcome {
    let (answer, loads) = match response {
        Response::Skipped(reason) => {
            return Outcome::Skipped {
                reason: reason.clone(),
            }
        }
        Response::NoAnswer(error) => {
            return Outcome::Fail {
                cause: format!("no_answer: {error}"),
            }
        }
        Response::Answered {
            answer,
            load_placements,
        } => (answer, load_placements),
    };
    if loads.as_slice() != placements {
        return Outcome::Skipped {
            reason: format!(
                "the router placed the load requests on {}, the trace on {}: the judged request saw another load than the case's",
                loads.join(","),
                placements.join(",")
            ),
        };
    }
    if case.expect.admits(answer) {
        return match case.expect {
            Answer::AnyOf(_) => Outcome::Tie,
            _ => Outcome::Pass,
        };
    }
    if case.defect.answer.admits(answer) {
        return Outcome::Fail {
            cause: case.defect.cause.clone(),
        };
    }
    Outcome::Fail {
        cause: "new_finding".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::case::load;
    use super::*;
    use std::path::Path;

    fn case(name: &str) -> Case {
        load(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("../peers/conformance/cases/{name}.json")),
        )
        .unwrap()
    }

    fn answered(worker: &str, loads: &[&str]) -> Response {
        Response::Answered {
            answer: Answer::Worker(worker.into()),
            load_placements: loads.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn the_expected_worker_passes_and_the_defect_is_named() {
        let c = case("other_tenant_salt");
        assert_eq!(classify(&c, &answered("w1", &[]), &[]), Outcome::Pass);
        assert_eq!(
            classify(&c, &answered("w0", &[]), &[]),
            Outcome::Fail {
                cause: "tenant_ignored".into()
            }
        );
    }

    #[test]
    fn a_tie_is_reported_not_passed_and_a_pick_outside_it_fails() {
        let c = case("exact_tie_not_cold");
        assert_eq!(classify(&c, &answered("w1", &[]), &[]), Outcome::Tie);
        assert_eq!(
            classify(&c, &answered("w2", &[]), &[]),
            Outcome::Fail {
                cause: "reuse_ignored".into()
            }
        );
    }

    #[test]
    fn an_answer_no_defect_explains_is_a_new_finding() {
        let c = case("removal_scoped_choice");
        assert_eq!(
            classify(&c, &answered("w9", &[]), &[]),
            Outcome::Fail {
                cause: "new_finding".into()
            }
        );
    }

    #[test]
    fn a_load_request_sent_elsewhere_skips_the_case_naming_both_placements() {
        let c = case("load_decides_equal_holdings");
        let placements = ["w0".to_string(), "w0".to_string()];
        let Outcome::Skipped { reason } = classify(&c, &answered("w1", &["w0", "w1"]), &placements)
        else {
            panic!("a case whose load went elsewhere is skipped");
        };
        assert!(reason.contains("on w0,w1, the trace on w0,w0"), "{reason}");
        assert_eq!(
            classify(&c, &answered("w1", &["w0", "w0"]), &placements),
            Outcome::Pass
        );
    }

    #[test]
    fn skipped_and_unanswered_are_kept_apart() {
        let c = case("exact_tie");
        assert_eq!(
            classify(&c, &Response::Skipped("no overlap answer".into()), &[]).name(),
            "skipped"
        );
        assert_eq!(
            classify(&c, &Response::NoAnswer("timed out".into()), &[]).name(),
            "fail"
        );
    }
}
