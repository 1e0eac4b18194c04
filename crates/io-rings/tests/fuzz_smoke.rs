//! A stable-Rust stand-in for the cargo-fuzz targets `io_request`, `aio_ring` and `uring_ring`:
//! the same drivers (`fuzz_driver`) over thousands of deterministic random inputs, and over
//! scripts that never corrupt the structures, so that the shadow model checks every look.

mod fuzz_driver;

/// A deterministic generator (a 64-bit LCG's high bits).
struct Random(u64);

impl Random {
    fn below(&mut self, n: u32) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % u64::from(n)) as u32
    }

    fn byte(&mut self) -> u8 {
        self.below(256) as u8
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
}

#[test]
fn random_inputs_never_panic() {
    let mut r = Random(11);
    for round in 0..20_000 {
        let len = r.below(160) as usize;
        let data = r.bytes(len);
        match round % 3 {
            0 => fuzz_driver::requests(&data),
            1 => fuzz_driver::aio_ring(&data),
            _ => fuzz_driver::uring_ring(&data),
        }
    }
}

#[test]
fn vectored_requests_read_their_iovecs() {
    let mut r = Random(5);
    for _ in 0..5_000 {
        let len = 64 + r.below(160) as usize;
        let mut data = r.bytes(len);
        // Vectored opcodes, odd priorities (iovecs in the made-up memory), small counts.
        data[16] = if r.below(2) == 0 { 7 } else { 8 };
        data[18] |= 1;
        data[20..24].copy_from_slice(&r.below(8).to_le_bytes());
        data[32..40].copy_from_slice(&u64::from(r.below(6)).to_le_bytes());
        data[47] = 0;
        fuzz_driver::requests(&data);
    }
}

/// A Linux AIO script that only posts and looks.
fn clean_aio_script(r: &mut Random) -> Vec<u8> {
    let mut s = vec![r.byte(), r.byte(), 0];
    for _ in 0..r.below(40) {
        if r.below(3) == 0 {
            s.push(2);
        } else {
            s.extend([0, r.below(6) as u8]);
        }
    }
    s.push(2);
    s
}

/// An io_uring script that hands out, reads, submits, posts and looks, never corrupting.
fn clean_uring_script(r: &mut Random) -> Vec<u8> {
    let mut s = vec![r.byte(), r.byte()];
    // Counters anywhere, often near their wrap.
    for _ in 0..2 {
        let v: u32 = if r.below(2) == 0 {
            u32::MAX - r.below(20)
        } else {
            r.below(u32::MAX)
        };
        s.extend(v.to_le_bytes());
    }
    s.push(0);
    for _ in 0..r.below(40) {
        match r.below(5) {
            0 => {
                let n = r.below(4) as u8;
                s.extend([0, n]);
                for _ in 0..n {
                    s.extend(r.bytes(32));
                }
            }
            3 => s.extend([3, r.below(24) as u8]),
            op => s.push(op as u8),
        }
    }
    s.extend([1, 4]);
    s
}

#[test]
fn clean_scripts_report_exactly_what_was_posted() {
    let mut r = Random(3);
    for _ in 0..5_000 {
        fuzz_driver::aio_ring(&clean_aio_script(&mut r));
        fuzz_driver::uring_ring(&clean_uring_script(&mut r));
    }
}
