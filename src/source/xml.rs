//! The XML both XML formats (hwloc, NCCL topology files) are read with: roxmltree under limits
//! (nesting, node count) and with DTD internal subsets (entity declarations) refused before
//! parsing, and the prolog sniffing that recognises a format by its first element.
//!
//! This module reads text handed to it; it must not interpret either format.

use super::record::{Format, RecordError};

/// Deepest element nesting accepted. hwloc's deepest real trees (a PCI chain of a DGX-2 under
/// Machine/Package/Group) are some 20 levels; NCCL's fewer.
const MAX_DEPTH: usize = 256;
/// Most XML nodes (elements, attributes' owners, text) accepted: a 192-core hwloc XML has some
/// 20,000; room for machines ten times bigger.
const MAX_NODES: u32 = 1 << 21;

/// `open_xml`, for `format` whose root element must be `<root>`.
pub(super) fn open_format<'a>(
    text: &'a str,
    format: Format,
    root: &str,
) -> Result<roxmltree::Document<'a>, RecordError> {
    let doc = open_xml(text)?;
    let found = doc.root_element().tag_name().name();
    if found != root {
        return Err(RecordError::NotThisFormat(
            format.article_name(),
            format!("its root element is <{found}>, not <{root}>"),
        ));
    }
    Ok(doc)
}

/// Parse XML text with the limits above; refusals name what was refused.
pub(super) fn open_xml(text: &str) -> Result<roxmltree::Document<'_>, RecordError> {
    // hwloc writes `<!DOCTYPE topology SYSTEM "hwloc2.dtd">`: a DOCTYPE naming an external DTD
    // (never fetched) is fine; one with an internal subset, where entities are declared, is
    // refused before parsing.
    let internal_subset = match prolog(text).doctype {
        Some(decl) => decl.contains('['),
        None => false,
    };
    if internal_subset {
        return Err(RecordError::Refused(
            "the XML declares a DTD with an internal subset (entities): refused".into(),
        ));
    }
    let opt = roxmltree::ParsingOptions {
        allow_dtd: true,
        nodes_limit: MAX_NODES,
        ..roxmltree::ParsingOptions::default()
    };
    let doc = match roxmltree::Document::parse_with_options(text, opt) {
        Ok(d) => d,
        Err(roxmltree::Error::NodesLimitReached) => {
            return Err(RecordError::Refused(format!(
                "the XML has more than {MAX_NODES} nodes"
            )));
        }
        Err(e @ roxmltree::Error::EntityReferenceLoop(_)) => {
            return Err(RecordError::Refused(format!("{e}")));
        }
        Err(e) => return Err(RecordError::Malformed(format!("not well-formed XML: {e}"))),
    };
    // The document is flat in memory, but the walkers after this one recurse: bound the
    // depth here once. Descendants come in document order, a parent before its children.
    let mut depth: Vec<u16> = vec![0; doc.descendants().count()];
    for n in doc.descendants() {
        let d = match n.parent() {
            Some(p) => depth.get(p.id().get() as usize).copied().unwrap_or(0) + 1,
            None => 0,
        };
        if usize::from(d) > MAX_DEPTH {
            return Err(RecordError::Refused(format!(
                "the XML nests deeper than {MAX_DEPTH} elements"
            )));
        }
        if let Some(slot) = depth.get_mut(n.id().get() as usize) {
            *slot = d;
        }
    }
    Ok(doc)
}

/// What comes before the first element of an XML text.
struct Prolog<'a> {
    /// The DOCTYPE declaration up to its first `>` (an internal subset starts with `[`).
    doctype: Option<&'a str>,
    /// The first element's name; None when the text does not start like XML.
    first_element: Option<&'a str>,
}

/// Read past the declaration, comments, processing instructions and a DOCTYPE to the first
/// element. Reads only that far (cheap on any input).
fn prolog(text: &str) -> Prolog<'_> {
    let mut out = Prolog {
        doctype: None,
        first_element: None,
    };
    let mut rest = text.trim_start_matches('\u{feff}');
    loop {
        rest = rest.trim_start();
        let skip = |r: &'_ str, end: &str| r.find(end).map(|i| i + end.len());
        if let Some(r) = rest.strip_prefix("<?") {
            let Some(i) = skip(r, "?>") else { return out };
            rest = &r[i..];
        } else if let Some(r) = rest.strip_prefix("<!--") {
            let Some(i) = skip(r, "-->") else { return out };
            rest = &r[i..];
        } else if let Some(r) = rest.strip_prefix("<!") {
            let Some(i) = r.find('>') else {
                out.doctype = Some(r);
                return out;
            };
            if r.starts_with("DOCTYPE") {
                out.doctype = Some(&r[..i]);
                if r[..i].contains('[') {
                    return out;
                }
            }
            rest = &r[i + 1..];
        } else if let Some(r) = rest.strip_prefix('<') {
            let end = r
                .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
                .unwrap_or(r.len());
            out.first_element = Some(&r[..end]).filter(|n| !n.is_empty());
            return out;
        } else {
            return out;
        }
    }
}

/// The name of the first element of an XML text, past the declaration, comments, processing
/// instructions and a DOCTYPE; None when the text does not start like XML.
pub(super) fn first_element_name(text: &str) -> Option<&str> {
    prolog(text).first_element
}
