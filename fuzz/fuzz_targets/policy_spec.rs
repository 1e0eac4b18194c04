//! Fuzzes the policy-spec and cache-size parsers: any text parses or fails cleanly; a parsed
//! policy prints back to an equal spec and builds (or refuses) a tiny resident set without
//! panicking; a parsed size resolves to at least one unit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_policy::PolicySpec;
use memvisor_sim::CacheSize;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(spec) = s.parse::<PolicySpec>() {
        let again: PolicySpec = spec.to_string().parse().expect("Display parses back");
        assert_eq!(again, spec);
        let future = spec
            .is_offline()
            .then(|| memvisor_policy::Future::from(vec![u64::MAX; 8]));
        if let Ok(mut p) = spec.build(3, future) {
            for u in [1u64, 2, 3, 4, 1] {
                if p.contains(u) {
                    p.on_hit(u);
                } else {
                    p.admit(u);
                }
            }
            assert!(p.len() <= 3);
        }
    }
    if let Ok(sizes) = CacheSize::parse_list(s) {
        for size in sizes {
            assert!(size.resolve(0) >= 1 && size.resolve(1 << 40) >= 1);
        }
    }
});
