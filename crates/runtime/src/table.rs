//! Aligned text columns for the operator commands' tables (subscriptions,
//! inspect, acls, capacity): each column as wide as its widest cell, two
//! spaces apart, no trailing blanks. One home, so every table reads alike.

/// The header and the rows as aligned lines, each ending in a newline.
pub fn aligned<H, R>(header: &[H], rows: &[R]) -> String
where
    H: AsRef<str>,
    R: AsRef<[String]>,
{
    let mut widths: Vec<usize> = header.iter().map(|h| h.as_ref().len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row.as_ref()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let joined = cells
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ");
        out.push_str(joined.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().map(AsRef::as_ref));
    for row in rows {
        line(&mut row.as_ref().iter().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_without_trailing_blanks() {
        let rows = vec![
            vec!["acme".to_owned(), "12.5".to_owned(), String::new()],
            vec![
                "a-much-longer-tenant".to_owned(),
                "1".to_owned(),
                "x".to_owned(),
            ],
        ];
        assert_eq!(
            aligned(&["TENANT", "WORKER_S", "NOTE"], &rows),
            "TENANT                WORKER_S  NOTE\n\
             acme                  12.5\n\
             a-much-longer-tenant  1         x\n"
        );
    }

    #[test]
    fn a_table_without_rows_is_its_header() {
        let rows: Vec<Vec<String>> = Vec::new();
        assert_eq!(aligned(&["A", "B"], &rows), "A  B\n");
    }
}
