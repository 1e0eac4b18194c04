//! [`svg_document`]: the frame every memvisor chart shares (white page, centred title and
//! subtitle), and the helpers its charts need (text escaping, round axis tops). The charts
//! themselves (`miss_ratio_svg` here, the benchmarks' plots) draw their axes and series into it.

use std::fmt::Write as _;

/// Opens a `width` × `height` SVG document on a white page with `font_size` as its default
/// size, and writes `title` (16 px, at y 22) and `subtitle` (11 px, grey, at y 40), both escaped
/// and centred on `center_x`. The chart appends its elements and then `</svg>`.
pub fn svg_document(
    width: f64,
    height: f64,
    font_size: u32,
    center_x: f64,
    title: &str,
    subtitle: &str,
) -> String {
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="{font_size}">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{center_x}" y="22" text-anchor="middle" font-size="16">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        svg,
        r##"<text x="{center_x}" y="40" text-anchor="middle" font-size="11" fill="#444">{}</text>"##,
        escape(subtitle)
    );
    svg
}

/// `s` with the characters SVG text and attribute values reserve replaced by entities.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The smallest of `multiples` (ascending, within one decade: e.g. `[1, 2, 5]`) times a power
/// of ten that is at least `v` (`v` > 0): a round top for an axis.
pub fn nice_ceiling(v: f64, multiples: &[f64]) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    multiples
        .iter()
        .map(|m| m * p)
        .find(|c| *c >= v * 0.999_999)
        .unwrap_or(10.0 * p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_title_and_escaping() {
        let s = svg_document(100.0, 50.0, 13, 50.0, "a < b", "x & \"y\"");
        assert!(s.starts_with("<svg ") && s.contains(r#"width="100" height="50""#));
        assert!(s.contains("a &lt; b") && s.contains("x &amp; &quot;y&quot;"));
        assert!(s.contains(r#"font-size="13""#) && s.contains(r#"x="50""#));
    }

    #[test]
    fn round_ceilings() {
        assert_eq!(nice_ceiling(0.37, &[1.0, 2.0, 2.5, 5.0]), 0.5);
        assert_eq!(nice_ceiling(0.22, &[1.0, 2.0, 2.5, 5.0]), 0.25);
        assert_eq!(nice_ceiling(0.22, &[1.0, 2.0, 5.0]), 0.5);
        assert_eq!(nice_ceiling(3700.0, &[1.0, 2.0, 5.0]), 5000.0);
        assert_eq!(nice_ceiling(100.0, &[1.0, 2.0, 5.0]), 100.0);
        assert_eq!(nice_ceiling(101.0, &[1.0, 2.0, 5.0]), 200.0);
        assert_eq!(nice_ceiling(9.5, &[1.0, 2.0, 5.0]), 10.0);
    }
}
