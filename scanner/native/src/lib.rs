//! qscan's hot per-packet steps in compiled code, a Python extension module (built by scripts/setup.sh):
//! what a capture of many clients does for every packet and every ClientHello. Everything that names a parameter or a
//! version stays in Python (tparams/, scanner/handshake/packets.py).

use pyo3::prelude::*;

mod capture;
mod crypto;
mod hello;
mod initial;

#[pymodule]
fn qscan_native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(initial::open_client_initial, module)?)?;
    module.add_function(wrap_pyfunction!(crypto::crypto_frames, module)?)?;
    module.add_function(wrap_pyfunction!(hello::client_hello_fields, module)?)?;
    module.add_function(wrap_pyfunction!(capture::ip_start, module)?)?;
    module.add_class::<capture::CaptureReader>()?;
    module.add("CaptureFileError", module.py().get_type::<capture::CaptureFileError>())?;
    module.add_class::<crypto::CryptoStream>()
}
