//! `hipobj token decode` and `hipobj reply parse`.

use hipobj_proto::{Reply, Token, Transport};
use serde_json::{Value, json};

use crate::error::{CliError, CliResult};

/// The fields of a token, as JSON.
pub(crate) fn token_json(t: &Token) -> Value {
    let gid = std::net::Ipv6Addr::from(t.gid);
    json!({
        "transport": match t.transport { Transport::Rc => "RC", Transport::Dc => "DC" },
        "qpn": t.qpn,
        "gid": gid.to_string(),
        "gid_ipv4": t.client_ipv4().map(|ip| ip.to_string()),
        "rkey": format!("{:#010x}", t.rkey),
        "addr": format!("{:#018x}", t.addr),
        "len": t.len,
        "port": t.port,
        "lid": t.lid,
    })
}

fn token_text(t: &Token, indent: &str) -> String {
    let gid = std::net::Ipv6Addr::from(t.gid);
    let ipv4 = t
        .client_ipv4()
        .map_or_else(|| "not IPv4-mapped".to_owned(), |ip| ip.to_string());
    let transport = match t.transport {
        Transport::Rc => "RC (reliable connected)",
        Transport::Dc => "DC (dynamically connected)",
    };
    format!(
        "{indent}transport  {transport}\n{indent}qpn        {} ({:#x})\n{indent}gid        {gid}\n{indent}gid ipv4   {ipv4}\n\
         {indent}rkey       {:#010x}\n{indent}addr       {:#018x}\n{indent}len        {} bytes\n{indent}port       {}\n{indent}lid        {}\n",
        t.qpn, t.qpn, t.rkey, t.addr, t.len, t.port, t.lid
    )
}

/// `hipobj token decode TOKEN`.
pub(crate) fn decode(token: &str, as_json: bool) -> CliResult<String> {
    let t = Token::decode(token.trim().as_bytes()).map_err(|e| {
        CliError::coded(
            hipobj::ErrorKind::InvalidValue,
            format!("not a hipObject token: {e}"),
        )
    })?;
    Ok(if as_json {
        format!("{:#}\n", token_json(&t))
    } else {
        token_text(&t, "")
    })
}

/// `hipobj reply parse VALUE`.
pub(crate) fn parse_reply(value: &str, as_json: bool) -> CliResult<String> {
    let r = hipobj_proto::parse_reply(value.as_bytes()).map_err(|e| {
        CliError::coded(
            hipobj::ErrorKind::S3Error,
            format!("not an x-amz-rdma-reply value: {e}"),
        )
    })?;
    let code = r.http_code();
    let meaning = match r {
        Reply::Bind { .. } => "bind: connect to the server's queue pair and send the same request again",
        Reply::Done { .. } => "success: the named server queue pair moved the counted bytes",
        _ if r.is_success() => {
            "success without proof (no server queue pair and byte count): an RC transfer refuses it"
        }
        _ if code == hipobj_proto::REPLY_NOT_IMPLEMENTED => {
            "declined: the server does not serve RDMA; use plain HTTP"
        }
        _ => "failure",
    };
    let psn = match r {
        Reply::Bind { psn, .. } => Some(psn),
        _ => None,
    };
    if as_json {
        return Ok(format!(
            "{:#}\n",
            json!({
                "code": code,
                "success": r.is_success(),
                "meaning": meaning,
                "psn": psn.map(|p| format!("{p:06x}")),
                "bytes": r.bytes(),
                "token": r.peer_token().map(token_json),
            })
        ));
    }
    let mut out = format!("code       {code}\nmeaning    {meaning}\n");
    if let Some(p) = psn {
        out.push_str(&format!("psn        {p:06x}\n"));
    }
    if let Some(n) = r.bytes() {
        out.push_str(&format!("bytes      {n}\n"));
    }
    if let Some(t) = r.peer_token() {
        out.push_str("server token:\n");
        out.push_str(&token_text(t, "  "));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Token {
        Token {
            transport: Transport::Rc,
            qpn: 0x11,
            gid: hipobj_platform::Gid::from_ipv4(std::net::Ipv4Addr::new(127, 0, 0, 2)).0,
            rkey: 0xabcd,
            addr: 0x1000,
            len: 4096,
            port: 1,
            lid: 0,
        }
    }

    #[test]
    fn decodes_every_field() -> CliResult {
        let hex = sample().encode();
        let text = decode(hex.as_str(), false)?;
        for want in [
            "RC",
            "0x11",
            "::ffff:127.0.0.2",
            "127.0.0.2",
            "0x0000abcd",
            "4096 bytes",
        ] {
            assert!(text.contains(want), "{want} missing from {text}");
        }
        let j: Value =
            serde_json::from_str(&decode(hex.as_str(), true)?).map_err(|e| CliError::plain(e.to_string()))?;
        assert_eq!(j["qpn"], 0x11);
        assert_eq!(j["gid_ipv4"], "127.0.0.2");
        assert!(decode("abc", false).is_err());
        Ok(())
    }

    #[test]
    fn parses_replies() -> CliResult {
        let bind = Reply::Bind {
            token: sample(),
            psn: 0xc0de,
        }
        .to_string();
        let text = parse_reply(&bind, false)?;
        assert!(text.contains("code       409") && text.contains("00c0de") && text.contains("127.0.0.2"));
        assert!(parse_reply("501", false)?.contains("declined"));
        assert!(parse_reply("200", true)?.contains("\"success\": true"));
        assert!(parse_reply("20", false).is_err());
        Ok(())
    }
}
