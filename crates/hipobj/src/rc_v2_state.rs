//! The stages of one hipobj-rc-v2 session on the client's side, as a pure
//! value: no I/O, no verbs, no clock. [`crate::RcV2Session`] runs the
//! requests, the checks and the QP, and asks this machine at each step
//! whether the step fits and where the session goes next.
//!
//! ```text
//!   Prepare --Prepared--> Connect --Connected--> Ready
//!   Ready --WriteStarted (PUT)--> Writing
//!   Ready (GET) | Writing (PUT) --ReadyAnswered--> Proof --Proven--> Done
//!   Ready (PUT, no write yet) --ReadyAnswered--> Failed
//!   any stage but Done and Failed --Fail--> Failed
//! ```
//!
//! The machine also keeps the server's session id from the moment a
//! PREPARE answer named one until an answer to READY ended it: while it
//! holds one, the server holds resources, and a session that fails owes it
//! a CANCEL ([`V2State::cancel_owed`]). An input that does not fit the
//! stage is refused and changes nothing.

use hipobj_proto::rc_v2::SessionId;

use crate::direction::Direction;

/// Where a session is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// PREPARE not answered yet.
    Prepare,
    /// PREPARE answered; the answer is being checked and the QP connected
    /// (and a GET's range granted).
    Connect,
    /// Connected: READY may go (a PUT's write starts once it is on its
    /// way).
    Ready,
    /// PUT: the write is posted; READY not answered yet.
    Writing,
    /// READY answered with what the client now proves: the server's WRITE
    /// WITH IMMEDIATE (GET) or the client's write completion (PUT), the
    /// counts and the checksum.
    Proof,
    /// Proven: the bytes moved.
    Done,
    /// Failed or given up; nothing more is accepted.
    Failed,
}

/// What happened, as the runner saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Input {
    /// A PREPARE answer came; `session` is the id it named, if any (even an
    /// answer otherwise unusable may name one, and is then owed a CANCEL).
    Prepared { session: Option<SessionId> },
    /// The answer passed its checks and the QP is connected.
    Connected,
    /// PUT: the client's write is posted.
    WriteStarted,
    /// READY was answered, whatever the answer: the server's session is
    /// over.
    ReadyAnswered,
    /// The answer and the RDMA proved the transfer.
    Proven,
    /// A check, a request or the RDMA failed (or the application gave up).
    Fail,
}

/// An input that does not fit the stage it came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Misfit {
    /// The stage the session was in (and stays in).
    pub stage: Stage,
    /// The input refused.
    pub input: Input,
}

/// One session's stage and the server's session id it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct V2State {
    dir: Direction,
    stage: Stage,
    session: Option<SessionId>,
}

impl V2State {
    /// A session not yet prepared.
    pub(crate) fn new(dir: Direction) -> Self {
        Self {
            dir,
            stage: Stage::Prepare,
            session: None,
        }
    }

    /// The stage.
    pub(crate) fn stage(&self) -> Stage {
        self.stage
    }

    /// The server's session id while a CANCEL is owed for it: from a
    /// PREPARE answer that named one until READY was answered.
    pub(crate) fn cancel_owed(&self) -> Option<SessionId> {
        self.session
    }

    /// The stage a READY answer is taken in: connected (GET), the write
    /// posted (PUT).
    pub(crate) fn ready_stage(&self) -> Stage {
        match self.dir {
            Direction::Get => Stage::Ready,
            Direction::Put => Stage::Writing,
        }
    }

    /// Whether the session ended, with success or not.
    pub(crate) fn is_over(&self) -> bool {
        matches!(self.stage, Stage::Done | Stage::Failed)
    }

    /// Takes `input`: the stage it leads to, or the misfit (nothing
    /// changed).
    pub(crate) fn take(&mut self, input: Input) -> Result<Stage, Misfit> {
        let misfit = Misfit {
            stage: self.stage,
            input,
        };
        let next = match (self.stage, input) {
            (Stage::Prepare, Input::Prepared { session }) => {
                self.session = session;
                Stage::Connect
            }
            (Stage::Connect, Input::Connected) => Stage::Ready,
            (Stage::Ready, Input::WriteStarted) if self.dir == Direction::Put => Stage::Writing,
            (Stage::Ready | Stage::Writing, Input::ReadyAnswered) => {
                // Any answer to READY ends the server's session.
                self.session = None;
                if self.stage == self.ready_stage() {
                    Stage::Proof
                } else {
                    // A PUT answered before its write started: whatever the
                    // answer says, the client never wrote the bytes.
                    Stage::Failed
                }
            }
            (Stage::Proof, Input::Proven) => Stage::Done,
            (_, Input::Fail) if !self.is_over() => Stage::Failed,
            _ => return Err(misfit),
        };
        self.stage = next;
        Ok(next)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const ID: SessionId = SessionId([7; 16]);

    fn run(dir: Direction, inputs: &[Input]) -> (V2State, Vec<Result<Stage, Misfit>>) {
        let mut s = V2State::new(dir);
        let out = inputs.iter().map(|&i| s.take(i)).collect();
        (s, out)
    }

    #[test]
    fn a_get_and_a_put_go_through_every_stage_to_done() {
        let get = [
            Input::Prepared { session: Some(ID) },
            Input::Connected,
            Input::ReadyAnswered,
            Input::Proven,
        ];
        let (s, out) = run(Direction::Get, &get);
        assert_eq!(
            out,
            [
                Ok(Stage::Connect),
                Ok(Stage::Ready),
                Ok(Stage::Proof),
                Ok(Stage::Done)
            ]
        );
        assert_eq!(s.cancel_owed(), None);
        let put = [
            Input::Prepared { session: Some(ID) },
            Input::Connected,
            Input::WriteStarted,
            Input::ReadyAnswered,
            Input::Proven,
        ];
        let (s, out) = run(Direction::Put, &put);
        assert_eq!(out[2], Ok(Stage::Writing));
        assert_eq!(s.stage(), Stage::Done);
    }

    #[test]
    fn a_cancel_is_owed_from_a_named_session_until_ready_is_answered() {
        let mut s = V2State::new(Direction::Get);
        assert_eq!(s.cancel_owed(), None);
        s.take(Input::Prepared { session: Some(ID) }).unwrap();
        assert_eq!(s.cancel_owed(), Some(ID));
        // A failed check after PREPARE: still owed.
        s.take(Input::Fail).unwrap();
        assert_eq!((s.stage(), s.cancel_owed()), (Stage::Failed, Some(ID)));

        let mut s = V2State::new(Direction::Get);
        s.take(Input::Prepared { session: Some(ID) }).unwrap();
        s.take(Input::Connected).unwrap();
        s.take(Input::ReadyAnswered).unwrap();
        assert_eq!(s.cancel_owed(), None, "READY's answer ended the server's session");
        s.take(Input::Fail).unwrap();
        assert_eq!(s.cancel_owed(), None);
    }

    #[test]
    fn a_put_answered_before_its_write_fails_and_a_get_has_no_write() {
        let (s, out) = run(
            Direction::Put,
            &[
                Input::Prepared { session: Some(ID) },
                Input::Connected,
                Input::ReadyAnswered,
            ],
        );
        assert_eq!(out[2], Ok(Stage::Failed));
        assert_eq!(s.cancel_owed(), None);
        let (s, out) = run(
            Direction::Get,
            &[
                Input::Prepared { session: None },
                Input::Connected,
                Input::WriteStarted,
            ],
        );
        assert!(out[2].is_err());
        assert_eq!(s.stage(), Stage::Ready);
    }

    #[test]
    fn misfits_change_nothing_and_the_ends_take_nothing() {
        let mut s = V2State::new(Direction::Put);
        for i in [
            Input::Connected,
            Input::ReadyAnswered,
            Input::Proven,
            Input::WriteStarted,
        ] {
            assert_eq!(
                s.take(i),
                Err(Misfit {
                    stage: Stage::Prepare,
                    input: i
                })
            );
        }
        assert_eq!(s, V2State::new(Direction::Put));
        s.take(Input::Fail).unwrap();
        let before = s;
        assert!(s.take(Input::Fail).is_err(), "a failed session fails no further");
        assert!(s.take(Input::Prepared { session: Some(ID) }).is_err());
        assert_eq!(s, before);
    }

    /// Every input in every order: a refused input changes nothing, Done is
    /// reached only through Proof, a Done or Failed session takes nothing,
    /// and a CANCEL is owed only while a named session was never answered
    /// at READY.
    #[test]
    fn every_sequence_keeps_the_rules() {
        let inputs = [
            Input::Prepared { session: Some(ID) },
            Input::Prepared { session: None },
            Input::Connected,
            Input::WriteStarted,
            Input::ReadyAnswered,
            Input::Proven,
            Input::Fail,
        ];
        let n = inputs.len();
        for dir in [Direction::Get, Direction::Put] {
            // Every sequence of five inputs (7^5 = 16807).
            for mut code in 0..n.pow(5) {
                let mut s = V2State::new(dir);
                let mut answered = false;
                let mut named = false;
                for _ in 0..5 {
                    let i = inputs[code % n];
                    code /= n;
                    let before = s;
                    match s.take(i) {
                        Err(m) => {
                            assert_eq!(s, before);
                            assert_eq!((m.stage, m.input), (before.stage(), i));
                        }
                        Ok(next) => {
                            assert!(!before.is_over(), "{before:?} took {i:?}");
                            if next == Stage::Done {
                                assert_eq!(before.stage(), Stage::Proof);
                            }
                            if i == Input::ReadyAnswered {
                                answered = true;
                            }
                            if i == (Input::Prepared { session: Some(ID) }) {
                                named = true;
                            }
                        }
                    }
                    assert_eq!(s.cancel_owed().is_some(), named && !answered, "{s:?}");
                }
            }
        }
    }
}
