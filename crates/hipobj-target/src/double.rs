//! An in-process S3 server double on [`Target::serve`]: objects in memory,
//! each request answered exactly as the S3 server answers it (the reply
//! header, or an S3 error code with none). The client's tests, its
//! control-path bench and the GPU check all talk to this one double.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hipobj_proto::Token;

use crate::{Answer, Caller, Request, Selected, Sink, Source, Target, TargetError, lock};

/// What one request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
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
        }
    }

    /// Serves one request carrying the hex `token`: `Ok` with the
    /// `x-amz-rdma-reply` value (a bind or a success), or `Err` with the S3
    /// error code of a response that has no reply header.
    pub fn serve(&self, op: &Op, token: &str) -> Result<String, String> {
        let token = Token::decode(token.as_bytes()).map_err(|_| "InvalidRDMAToken".to_owned())?;
        self.serve_token(op, &token)
    }

    /// As [`serve`](Self::serve), for a decoded (or forged) token.
    pub fn serve_token(&self, op: &Op, token: &Token) -> Result<String, String> {
        let answer = match op {
            Op::Get(key) => {
                let data = lock(&self.objects).get(key).cloned();
                self.target
                    .serve(&self.caller, token, Request::Get(&mut Object(data.as_deref())))
            }
            Op::Put(key) => {
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
            Err(TargetError::Busy(_)) => Err("SlowDown".into()),
            Err(TargetError::Verbs(_) | TargetError::Transfer(_)) => Err("RDMATransferFailed".into()),
        }
    }
}
