//! include/hipobj.h checked against the Rust definitions of this crate.
//!
//! The header is written by hand and is the contract; the Rust side has to
//! match it. This test writes what the Rust side says (each struct's size,
//! alignment, field offsets and field types, each enumerator's value, each
//! macro's value, each exported function's signature) as C11
//! `_Static_assert`s and compiles them with the C compiler against the
//! header. A change on one side only fails here: on the Rust side the
//! tables below stop compiling (every struct is destructured field by field,
//! every `ErrorKind` matched, every function assigned to the pointer type
//! its table line spells), and on the C side an assertion fails and names
//! what differs.
//!
//! The Rust spelling of a type is mapped to C by [`c_type`]; a `c_int`
//! that the header declares as `hipObjOpError_t` is checked for the same
//! size and alignment, since a C enum's integer type is the compiler's
//! choice (GCC makes this one `unsigned int`).

use std::collections::BTreeSet;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use hipobj::ErrorKind;

use crate::api::{OP_GET, OP_PUT, SYNC_TO_DEVICE, SYNC_TO_HOST};
use crate::strings;
use crate::types::{
    BASE_ERR, HipObjConfig, HipObjError, HipObjOps, HipObjRcV2Session, OpError, RecvReplyFn, SUCCESS,
    SendRequestFn,
};
use crate::*;

/// Functions the header marks as hipObject's own addition to the spec.
const ADDITIVE: [&str; 10] = [
    "hipObjHandleRdmaReply",
    "hipObjSetServerAddress",
    "hipObjRcV2Begin",
    "hipObjRcV2PrepareHeaders",
    "hipObjRcV2HandlePrepare",
    "hipObjRcV2ReadyHeaders",
    "hipObjRcV2StartWrite",
    "hipObjRcV2HandleReady",
    "hipObjRcV2CancelHeaders",
    "hipObjRcV2End",
];

/// The C spelling of a Rust type as this crate spells it in a signature or
/// a field (whitespace ignored).
fn c_type(rust: &str) -> String {
    let rust: String = rust.chars().filter(|c| !c.is_whitespace()).collect();
    if let Some(inner) = rust.strip_prefix("*const") {
        return format!("{} const *", c_type(inner));
    }
    if let Some(inner) = rust.strip_prefix("*mut") {
        return format!("{} *", c_type(inner));
    }
    match rust.as_str() {
        "c_char" => "char",
        "c_int" => "int",
        "c_uint" => "unsigned int",
        "c_void" => "void",
        "u32" => "uint32_t",
        "u64" => "uint64_t",
        "usize" => "size_t",
        "libc::off_t" => "off_t",
        "OpError" => "hipObjOpError_t",
        "HipObjError" => "hipObjError_t",
        "HipObjConfig" => "hipObjConfig_t",
        "HipObjOps" => "hipObjOps_t",
        "HipObjRcV2Session" => "hipObjRcV2Session_t",
        "Option<SendRequestFn>" => "rust_SendRequestFn",
        "Option<RecvReplyFn>" => "rust_RecvReplyFn",
        other => panic!("no C spelling for the Rust type {other}: add one to c_type"),
    }
    .to_owned()
}

/// A function (or function pointer type) as the Rust side declares it.
struct Signature {
    name: &'static str,
    ret: String,
    args: Vec<String>,
}

impl Signature {
    fn typedef(&self, name: &str) -> String {
        let args = if self.args.is_empty() {
            "void".to_owned()
        } else {
            self.args.join(", ")
        };
        format!("typedef {} (*{name})({args});\n", self.ret)
    }
}

/// Exported functions: each line must be the function's exact Rust type
/// (the assignment does not compile otherwise).
macro_rules! functions {
    ($($name:ident: fn($($arg:ty),*) -> $ret:ty;)*) => {{
        $(let _: unsafe extern "C" fn($($arg),*) -> $ret = $name;)*
        vec![$(Signature {
            name: stringify!($name),
            ret: c_type(stringify!($ret)),
            args: vec![$(c_type(stringify!($arg))),*],
        }),*]
    }};
}

/// Function pointer types: each line must be the alias's exact type.
macro_rules! fn_pointers {
    ($($name:ident: fn($($arg:ty),*) -> $ret:ty;)*) => {{
        $({
            fn same(f: $name) -> unsafe extern "C" fn($($arg),*) -> $ret {
                f
            }
            let _ = same;
        })*
        vec![$(Signature {
            name: stringify!($name),
            ret: c_type(stringify!($ret)),
            args: vec![$(c_type(stringify!($arg))),*],
        }),*]
    }};
}

/// A struct's layout as Rust has it.
struct Layout {
    c_name: &'static str,
    size: usize,
    align: usize,
    /// Name, offset, C spelling of the type.
    fields: Vec<(&'static str, usize, String)>,
}

/// Structs: every field, in any order, with its Rust type. The pattern has
/// no `..`, so a field added on the Rust side must be listed here.
macro_rules! layout {
    ($t:ident as $c:literal { $($f:ident: $ft:ty),* $(,)? }) => {{
        #[allow(non_snake_case)]
        fn fields(v: &$t) {
            let $t { $($f: _),* } = v;
            $(let _: &$ft = &v.$f;)*
        }
        let _ = fields;
        Layout {
            c_name: $c,
            size: size_of::<$t>(),
            align: align_of::<$t>(),
            fields: vec![$((stringify!($f), offset_of!($t, $f), c_type(stringify!($ft)))),*],
        }
    }};
}

/// `hipObjOpError_t`: every `ErrorKind`, plus success. The match has no
/// wildcard, so a kind added on the Rust side must be listed here.
macro_rules! error_kinds {
    ($($kind:ident => $c:literal,)*) => {{
        fn every_kind_is_listed(k: ErrorKind) {
            match k {
                $(ErrorKind::$kind => {})*
            }
        }
        let _ = every_kind_is_listed;
        vec![("hipObjSuccess", i64::from(SUCCESS)), $(($c, i64::from(ErrorKind::$kind.code()))),*]
    }};
}

fn functions() -> Vec<Signature> {
    functions! {
        hipObjGetErrorString: fn(OpError) -> *const c_char;
        hipObjGetVersionString: fn() -> *const c_char;
        hipObjGetVersion: fn(*mut c_uint, *mut c_uint, *mut c_uint) -> HipObjError;
        hipObjInit: fn(*mut HipObjConfig) -> HipObjError;
        hipObjShutdown: fn() -> HipObjError;
        hipObjBufRegister: fn(*mut c_void, usize) -> HipObjError;
        hipObjBufRegisterHost: fn(*mut c_void, usize) -> HipObjError;
        hipObjBufDeregister: fn(*mut c_void) -> HipObjError;
        hipObjGet: fn(*mut c_void, *mut c_void, usize, libc::off_t, *mut HipObjOps, *mut c_void) -> HipObjError;
        hipObjPut: fn(*mut c_void, *const c_void, usize, libc::off_t, *mut HipObjOps, *mut c_void) -> HipObjError;
        hipObjBufSync: fn(*mut c_void, usize, libc::off_t, c_int) -> HipObjError;
        hipObjGetRdmaToken: fn(*const c_void, usize, c_int, *mut *mut c_char) -> HipObjError;
        hipObjPutRdmaToken: fn(*mut c_char) -> HipObjError;
        hipObjParseRdmaReply: fn(*const c_char, usize, *mut c_int) -> HipObjError;
        hipObjHandleRdmaReply: fn(*const c_char, usize, *mut c_int) -> HipObjError;
        hipObjSetServerAddress: fn(*const c_char) -> HipObjError;
        hipObjTokenClientNic: fn(*const c_char, *mut c_char, usize) -> HipObjError;
        hipObjRcV2Begin: fn(*const c_void, usize, libc::off_t, c_int, *mut *mut HipObjRcV2Session) -> HipObjError;
        hipObjRcV2PrepareHeaders: fn(*mut HipObjRcV2Session, *const c_char, *const c_char, u64, *mut c_char, *mut usize) -> HipObjError;
        hipObjRcV2HandlePrepare: fn(*mut HipObjRcV2Session, c_int, *const c_char, usize) -> HipObjError;
        hipObjRcV2ReadyHeaders: fn(*mut HipObjRcV2Session, *mut c_char, *mut usize) -> HipObjError;
        hipObjRcV2StartWrite: fn(*mut HipObjRcV2Session) -> HipObjError;
        hipObjRcV2HandleReady: fn(*mut HipObjRcV2Session, c_int, *const c_char, usize, *mut u64) -> HipObjError;
        hipObjRcV2CancelHeaders: fn(*mut HipObjRcV2Session, *mut c_char, *mut usize) -> HipObjError;
        hipObjRcV2End: fn(*mut HipObjRcV2Session) -> HipObjError;
    }
}

fn fn_pointers() -> Vec<Signature> {
    fn_pointers! {
        SendRequestFn: fn(*mut c_void, *const c_char, usize) -> c_int;
        RecvReplyFn: fn(*mut c_void, *mut c_char, *mut usize) -> c_int;
    }
}

fn layouts() -> Vec<Layout> {
    vec![
        layout!(HipObjError as "hipObjError_t" {
            opError: OpError,
            hipError: c_int,
        }),
        layout!(HipObjOps as "hipObjOps_t" {
            sendRequest: Option<SendRequestFn>,
            recvReply: Option<RecvReplyFn>,
        }),
        layout!(HipObjConfig as "hipObjConfig_t" {
            endpoint: *const c_char,
            region: *const c_char,
            accessKey: *const c_char,
            secretKey: *const c_char,
            flags: u32,
            gpuDevice: c_int,
            nicHint: *const c_char,
        }),
    ]
}

fn enumerators() -> Vec<(&'static str, i64)> {
    error_kinds! {
        InvalidValue => "hipObjInvalidValue",
        NotInitialized => "hipObjNotInitialized",
        AlreadyInitialized => "hipObjAlreadyInitialized",
        RdmaError => "hipObjRdmaError",
        S3Error => "hipObjS3Error",
        BufNotRegistered => "hipObjBufNotRegistered",
        BufAlreadyRegistered => "hipObjBufAlreadyRegistered",
        NicNotFound => "hipObjNicNotFound",
        DmabufNotSupported => "hipObjDmabufNotSupported",
        SizeTooLarge => "hipObjSizeTooLarge",
        InternalError => "hipObjInternalError",
        Busy => "hipObjBusy",
    }
}

/// Every value macro of the header, with the value the Rust side uses.
fn macros() -> Vec<(&'static str, i64)> {
    vec![
        ("HIPOBJ_VERSION_MAJOR", i64::from(strings::VERSION_MAJOR)),
        ("HIPOBJ_VERSION_MINOR", i64::from(strings::VERSION_MINOR)),
        ("HIPOBJ_VERSION_PATCH", i64::from(strings::VERSION_PATCH)),
        ("HIPOBJ_BASE_ERR", i64::from(BASE_ERR)),
        ("HIPOBJ_RDMA_OP_PUT", i64::from(OP_PUT)),
        ("HIPOBJ_RDMA_OP_GET", i64::from(OP_GET)),
        (
            "HIPOBJ_RDMA_REPLY_NOT_IMPLEMENTED",
            i64::from(hipobj_proto::REPLY_NOT_IMPLEMENTED),
        ),
        ("HIPOBJ_SYNC_TO_HOST", i64::from(SYNC_TO_HOST)),
        ("HIPOBJ_SYNC_TO_DEVICE", i64::from(SYNC_TO_DEVICE)),
        ("HIPOBJ_RCV2_HEADERS_MAX", crate::rc_v2::HEADERS_MAX as i64),
        ("HIPOBJ_RCV2_MAX_SIZE", i64::from(hipobj_proto::rc_v2::MAX_SIZE)),
    ]
}

/// Every string macro of the header, with the string the Rust side uses.
fn string_macros() -> Vec<(&'static str, &'static str)> {
    use hipobj_proto::rc_v2;
    vec![
        ("HIPOBJ_RCV2_PREPARE_PATH", rc_v2::PREPARE_PATH),
        ("HIPOBJ_RCV2_READY_PATH", rc_v2::READY_PATH),
        ("HIPOBJ_RCV2_CANCEL_PATH", rc_v2::CANCEL_PATH),
    ]
}

/// The header's string macros: name and the literal's text.
fn header_string_macros(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("#define "))
        .filter_map(|rest| {
            let name = identifier(rest.trim_start());
            let value = rest.trim_start()[name.len()..].trim();
            let lit = value.strip_prefix('"')?.strip_suffix('"')?;
            Some((name.to_owned(), lit.to_owned()))
        })
        .collect()
}

/// Macros that are not values: the export attribute.
const NOT_VALUES: [&str; 1] = ["HIPOBJ_API"];

/// The C program of assertions.
fn assertions() -> String {
    let mut c = String::new();
    let mut check = |cond: String, what: String| {
        let _ = writeln!(c, "_Static_assert({cond}, \"{what}\");");
    };
    check(
        format!("sizeof(hipObjOpError_t) == {}", size_of::<OpError>()),
        format!(
            "hipObjOpError_t: Rust passes it as a {}-byte int",
            size_of::<OpError>()
        ),
    );
    check(
        format!("_Alignof(hipObjOpError_t) == {}", align_of::<OpError>()),
        format!("hipObjOpError_t: Rust aligns it to {}", align_of::<OpError>()),
    );
    for (name, value) in enumerators() {
        check(format!("{name} == {value}"), format!("{name}: Rust has {value}"));
    }
    for (name, value) in macros() {
        check(format!("{name} == {value}"), format!("{name}: Rust has {value}"));
    }
    let mut typedefs = String::new();
    for p in fn_pointers() {
        typedefs.push_str(&p.typedef(&format!("rust_{}", p.name)));
    }
    for l in layouts() {
        let t = l.c_name;
        check(
            format!("sizeof({t}) == {}", l.size),
            format!("sizeof({t}): Rust has {}", l.size),
        );
        check(
            format!("_Alignof({t}) == {}", l.align),
            format!("_Alignof({t}): Rust has {}", l.align),
        );
        for (f, off, ty) in &l.fields {
            check(
                format!("offsetof({t}, {f}) == {off}"),
                format!("offsetof({t}, {f}): Rust has {off}"),
            );
            check(
                format!("__builtin_types_compatible_p(__typeof__((({t} *)0)->{f}), {ty})"),
                format!("{t}.{f}: Rust's type is {ty}"),
            );
        }
    }
    for f in functions() {
        let name = f.name;
        typedefs.push_str(&f.typedef(&format!("rust_{name}")));
        check(
            format!("__builtin_types_compatible_p(__typeof__(&{name}), rust_{name})"),
            format!("{name}: the Rust export is {} ({})", f.ret, f.args.join(", ")),
        );
    }
    format!(
        "/* Written by hipobj-capi's header_check test: the Rust side's view of hipobj.h. */\n\
         #include <stddef.h>\n#include <stdint.h>\n#include <sys/types.h>\n#include \"hipobj.h\"\n\n\
         {typedefs}\n{c}"
    )
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn header() -> String {
    std::fs::read_to_string(root().join("include/hipobj.h")).expect("include/hipobj.h")
}

/// Compiles `program` against the header in `include_dir`; the compiler's
/// messages on failure.
fn compile(program: &str, include_dir: &Path, tag: &str) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("hipobj-header-check-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let file = dir.join("header_check.c");
    std::fs::write(&file, program).expect("writing the C check");
    let out = Command::new("cc")
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
            "-I",
        ])
        .arg(include_dir)
        .arg(&file)
        .output()
        .expect("running cc (apt-get install gcc)");
    let _ = std::fs::remove_dir_all(&dir);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn identifier(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The header's function names.
fn header_functions(text: &str) -> BTreeSet<String> {
    text.split("HIPOBJ_API ")
        .skip(1)
        .filter_map(|decl| {
            let head = decl.split('(').next()?;
            let name = head
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .rfind(|w| !w.is_empty())?;
            name.starts_with("hipObj").then(|| name.to_owned())
        })
        .collect()
}

/// The header's `#define`d names, minus the include machinery.
fn header_macros(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("#define "))
        .map(|rest| identifier(rest.trim_start()).to_owned())
        .collect()
}

/// The enumerators of `hipObjOpError_t`.
fn header_enumerators(text: &str) -> BTreeSet<String> {
    let start = text
        .find("typedef enum {")
        .expect("the header has hipObjOpError_t");
    let body = &text[start..];
    let end = body.find("} hipObjOpError_t;").expect("hipObjOpError_t ends");
    body[..end]
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("hipObj"))
        .map(|l| identifier(l).to_owned())
        .collect()
}

#[test]
fn header_matches_the_rust_definitions() {
    let program = assertions();
    if let Err(msg) = compile(&program, &root().join("include"), "ok") {
        panic!("include/hipobj.h and the Rust definitions disagree:\n{msg}\nThe check:\n{program}");
    }
}

#[test]
fn every_header_item_is_checked() {
    let text = header();
    let checked: BTreeSet<String> = functions().iter().map(|f| f.name.to_owned()).collect();
    assert_eq!(
        header_functions(&text),
        checked,
        "functions: header vs the Rust table"
    );

    let mut defined = header_macros(&text);
    for n in NOT_VALUES {
        assert!(defined.remove(n), "the header no longer defines {n}");
    }
    let strings_in_header = header_string_macros(&text);
    for (name, value) in string_macros() {
        assert!(defined.remove(name), "the header no longer defines {name}");
        assert!(
            strings_in_header.iter().any(|(n, v)| n == name && v == value),
            "{name}: Rust has \"{value}\", the header {strings_in_header:?}"
        );
    }
    assert_eq!(
        strings_in_header.len(),
        string_macros().len(),
        "string macros: header vs the Rust table"
    );
    let checked: BTreeSet<String> = macros().iter().map(|m| m.0.to_owned()).collect();
    assert_eq!(defined, checked, "value macros: header vs the Rust table");

    let checked: BTreeSet<String> = enumerators().iter().map(|e| e.0.to_owned()).collect();
    assert_eq!(
        header_enumerators(&text),
        checked,
        "hipObjOpError_t: header vs Rust"
    );
    // The error strings cover exactly the codes.
    for (name, value) in enumerators() {
        let code = c_int::try_from(value).expect("small");
        assert_ne!(
            strings::error_string(code),
            strings::error_string(-1),
            "{name} has no sentence of its own"
        );
    }
}

#[test]
fn additive_functions_stay_marked_in_the_header() {
    let text = header();
    for name in ADDITIVE {
        let decl = text
            .find(&format!("HIPOBJ_API hipObjError_t {name}("))
            .unwrap_or_else(|| panic!("the header does not declare {name}"));
        let doc_start = text[..decl].rfind("/*!").expect("a doc comment");
        let doc = &text[doc_start..decl];
        assert!(
            doc.contains("hipObject added this function") && doc.contains("cuObject has none"),
            "{name}'s comment no longer says it is hipObject's addition:\n{doc}"
        );
    }
}

/// The check itself can fail: a header edited on one side only (an
/// enumerator's value, a field order, a parameter type) does not compile.
#[test]
fn a_one_sided_header_edit_fails_the_check() {
    let text = header();
    let program = assertions();
    let edits: [(&str, &str, &str); 3] = [
        (
            "hipObjSuccess = 0,",
            "hipObjSuccess = 1,",
            "hipObjSuccess: Rust has 0",
        ),
        (
            "    int             hipError;\n} hipObjError_t;",
            "    int             hipError;\n    int             extra;\n} hipObjError_t;",
            "sizeof(hipObjError_t): Rust has 8",
        ),
        (
            "hipObjBufSync(void *devPtr, size_t size, off_t offset, int direction);",
            "hipObjBufSync(void *devPtr, size_t size, off_t offset, unsigned direction);",
            "hipObjBufSync: the Rust export is",
        ),
    ];
    for (i, (from, to, expect)) in edits.iter().enumerate() {
        assert!(
            text.contains(from),
            "the header no longer holds {from:?}: update this test"
        );
        let dir = std::env::temp_dir().join(format!("hipobj-header-edit-{}-{i}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        std::fs::write(dir.join("hipobj.h"), text.replacen(from, to, 1)).expect("scratch header");
        let result = compile(&program, &dir, &format!("edit{i}"));
        let _ = std::fs::remove_dir_all(&dir);
        let msg = result.expect_err("a header edited on one side must fail the check");
        assert!(msg.contains(expect), "edit {to:?}: expected {expect:?} in\n{msg}");
    }
}
