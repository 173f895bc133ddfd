//! An in-process S3 server double on [`Target::serve`]: objects in memory,
//! each request answered exactly as the S3 server answers it (the reply
//! header, or an S3 error code with none). The client's tests, its
//! control-path bench and the GPU check all talk to this one double.
//!
//! [`ObjectServer::hostile`] makes it a malicious server instead: its GETs
//! move the bytes as a [`Cheat`] says, and it answers the full success
//! reply with the count the client asked for, whatever moved. The client
//! must refuse every one of them (docs/protocol.md §8).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use hipobj_proto::Token;

use crate::bindings::Binding;
use crate::{
    Answer, Caller, MoveError, Request, Selected, Sink, Source, Target, TargetError, lock, pipeline,
};

/// How a malicious server moves a GET's bytes. Each then claims the whole
/// selection in its success reply.
#[derive(Debug)]
pub enum Cheat {
    /// Moves nothing: one zero-length WRITE WITH IMMEDIATE whose immediate
    /// is the token's key (a value the token hands the server).
    KeyAlone,
    /// Writes only the first `n` bytes, as one WRITE WITH IMMEDIATE
    /// carrying the token's key.
    Part(u64),
    /// Writes the selection in chunks of the target's configured size,
    /// each a WRITE WITH IMMEDIATE carrying the token's key, but for the
    /// chunk of index `i`.
    SkipChunk(u64),
    /// Honest until [armed](Cheat::arm), then once: WRITEs one byte just
    /// past the token's range (the client's NIC refuses it, the binding
    /// fails, and the server binds afresh with a 409), then, on the new
    /// binding, moves the whole selection honestly.
    PastTheEnd(AtomicBool),
    /// Writes the selection's first 4 KiB again and again, as many times as
    /// there are 4 KiB pieces in the selection, each time as one WRITE WITH
    /// IMMEDIATE whose immediate value is the token's key XOR the piece's
    /// index: a server naming every place while writing only the first, so
    /// that the rest of the buffer keeps whatever it held before (issue 38
    /// finding 5).
    RepeatFirst,
}

impl Cheat {
    /// [`Cheat::PastTheEnd`], not armed.
    pub fn past_the_end() -> Self {
        Self::PastTheEnd(AtomicBool::new(false))
    }

    /// Arms a [`Cheat::PastTheEnd`] for the next GET that finds a binding.
    pub fn arm(&self) {
        if let Self::PastTheEnd(armed) = self {
            armed.store(true, Ordering::SeqCst);
        }
    }
}

/// A GET of `total` bytes moved as `cheat` says; returns the count it
/// claims (always `total`).
pub(crate) fn cheat_get<E>(
    target: &Target,
    binding: &Binding,
    token: &Token,
    src: &mut dyn Source<Error = E>,
    total: u64,
    cheat: &Cheat,
) -> Result<u64, MoveError<E>> {
    let key = hipobj_proto::landed::imm(token.rkey);
    // One WRITE WITH IMMEDIATE of `len` bytes of the selection from `from`,
    // at the token's address plus `at`, carrying `imm`.
    let mut write = |at: u64, from: u64, len: u64, imm: u32| {
        target.run(
            binding,
            token.addr.wrapping_add(at),
            token.rkey,
            len,
            usize::try_from(len).unwrap_or(usize::MAX).max(1),
            pipeline::Flow::Write {
                fill: &mut |off, data| src.fill(from + off, data),
                imm,
            },
        )
    };
    match cheat {
        Cheat::KeyAlone => write(0, 0, 0, key)?,
        Cheat::Part(n) => write(0, 0, (*n).min(total), key)?,
        Cheat::SkipChunk(i) => {
            let chunk = target.config.chunk.max(1) as u64;
            for j in (0..total.div_ceil(chunk)).filter(|j| j != i) {
                let from = j * chunk;
                write(from, from, chunk.min(total - from), key)?;
            }
        }
        Cheat::PastTheEnd(armed) => {
            if armed.swap(false, Ordering::SeqCst) {
                target.run(
                    binding,
                    token.addr.wrapping_add(token.len),
                    token.rkey,
                    1,
                    4096,
                    pipeline::Flow::Write {
                        fill: &mut |_, data| {
                            data.fill(0xee);
                            Ok(())
                        },
                        imm: key,
                    },
                )?;
            }
            target.write_whole(binding, token, total, src)?;
        }
        Cheat::RepeatFirst => {
            const PIECE: u64 = 4096;
            for i in 0..total.div_ceil(PIECE).max(1) {
                write(0, 0, PIECE.min(total), key ^ (i as u32))?;
            }
        }
    }
    Ok(total)
}

/// What one request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// GetObject of a key.
    Get(String),
    /// PutObject of a key.
    Put(String),
}

/// An S3 server in memory, whose RDMA is a [`Target`].
#[derive(Debug)]
pub struct ObjectServer {
    /// The target that moves the bytes.
    pub target: Arc<Target>,
    /// The objects, by key.
    pub objects: Mutex<HashMap<String, Vec<u8>>>,
    caller: Caller,
    cheat: Option<Cheat>,
}

struct Object<'a>(Option<&'a [u8]>);

impl Source for Object<'_> {
    type Error = &'static str;
    fn open(&mut self) -> Result<Selected, Self::Error> {
        let data = self.0.ok_or("NoSuchKey")?;
        Ok(Selected {
            len: data.len() as u64,
            partial: false,
        })
    }
    fn fill(&mut self, off: u64, buf: &mut [u8]) -> Result<(), Self::Error> {
        let data = self.0.ok_or("NoSuchKey")?;
        let off = usize::try_from(off).map_err(|_| "InternalError")?;
        let src = data.get(off..off + buf.len()).ok_or("InternalError")?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

#[derive(Default)]
struct Body {
    bytes: Vec<u8>,
    committed: bool,
}

impl Sink for Body {
    type Error = &'static str;
    fn open(&mut self, len: u64) -> Result<(), Self::Error> {
        self.bytes
            .reserve(usize::try_from(len).map_err(|_| "EntityTooLarge")?);
        Ok(())
    }
    fn drain(&mut self, _off: u64, chunk: &[u8]) -> Result<(), Self::Error> {
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }
    fn commit(&mut self) -> Result<(), Self::Error> {
        self.committed = true;
        Ok(())
    }
}

impl ObjectServer {
    /// A server with no objects; every request comes from one caller.
    pub fn new(target: Target) -> Self {
        Self {
            target: Arc::new(target),
            objects: Mutex::new(HashMap::new()),
            caller: Caller::key("double"),
            cheat: None,
        }
    }

    /// A malicious server: every GET moves its bytes as `cheat` says and
    /// claims the whole selection.
    pub fn hostile(target: Target, cheat: Cheat) -> Self {
        Self {
            cheat: Some(cheat),
            ..Self::new(target)
        }
    }

    /// How this server cheats, if it does.
    pub fn cheat(&self) -> Option<&Cheat> {
        self.cheat.as_ref()
    }

    /// Serves one request carrying the hex `token`: `Ok` with the
    /// `x-amz-rdma-reply` value (a bind or a success), or `Err` with the S3
    /// error code of a response that has no reply header.
    pub fn serve(&self, op: &Action, token: &str) -> Result<String, String> {
        let token = Token::decode(token.as_bytes()).map_err(|_| "InvalidRDMAToken".to_owned())?;
        self.serve_token(op, &token)
    }

    /// As [`serve`](Self::serve), for a decoded (or forged) token.
    pub fn serve_token(&self, op: &Action, token: &Token) -> Result<String, String> {
        let answer = match op {
            Action::Get(key) => {
                let data = lock(&self.objects).get(key).cloned();
                self.target.serve_as(
                    &self.caller,
                    token,
                    Request::Get(&mut Object(data.as_deref())),
                    self.cheat.as_ref(),
                )
            }
            Action::Put(key) => {
                let mut body = Body::default();
                let a = self.target.serve(&self.caller, token, Request::Put(&mut body));
                if matches!(a, Ok(Answer::Done { .. })) && body.committed {
                    lock(&self.objects).insert(key.clone(), body.bytes);
                }
                a
            }
        };
        match answer {
            Ok(Answer::Bind { reply, .. } | Answer::Done { reply, .. }) => Ok(reply.to_string()),
            Err(TargetError::Declined) => Ok("501".into()),
            Err(TargetError::Store(code)) => Err(code.to_owned()),
            Err(TargetError::InvalidToken(_)) => Err("InvalidRDMAToken".into()),
            Err(TargetError::NotTheCallers(_)) => Err("AccessDenied".into()),
            Err(TargetError::BufferTooSmall { .. }) => Err("RDMABufferTooSmall".into()),
            Err(TargetError::Busy(_) | TargetError::StagingBusy(_)) => Err("SlowDown".into()),
            Err(TargetError::Verbs(_) | TargetError::Transfer(_)) => Err("RDMATransferFailed".into()),
        }
    }
}
