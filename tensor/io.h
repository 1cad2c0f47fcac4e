// Tensors in and out of files: NumPy's .npy (one array) and .npz (a zip of .npy members).
//
// Files are little-endian and written in C order (a strided view or a CUDA tensor is made contiguous on the
// host first); NumPy reads them with numpy.load. Loading accepts .npy versions 1.0, 2.0 and 3.0, C and
// Fortran order (a Fortran-order array comes back as a C-order tensor with the same values), and .npz files
// written by numpy.savez (stored members, zip64 fields, data descriptors) and numpy.savez_compressed
// (deflated members, where the library is built with zlib).
//
// dtypes: float32 '<f4', int32 '<i4', uint8 '|u1'. Anything else (big-endian, other widths, complex, bool,
// structured, object) is a DTypeError naming the file and the descr.
// Errors name the file: InvalidArgument for a missing or unreadable file, a truncated header, a wrong magic
// string or a header that does not parse; ShapeError when the data do not match the shape (too short or too
// long) or the rank exceeds kMaxDims.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "minitensor/tensor/tensor.h"

namespace mt {

// Writes `t` (any device, any strides) as a C-order .npy file (version 1.0, or 2.0 when the header needs it).
void save_npy(const std::filesystem::path& path, const Tensor& t);

// Reads a .npy file into a new contiguous tensor on `device`.
Tensor load_npy(const std::filesystem::path& path, Device device = Device::cpu());

// Writes an uncompressed .npz (a zip of stored `<name>.npy` members, zip64 where sizes need it), the format
// of numpy.savez: numpy.load(path)[name] gives tensors.at(name). Names must be non-empty.
void save_npz(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors);

// Reads every member of a .npz into tensors on `device`, keyed by member name without its ".npy" suffix.
// Each member's CRC-32 is checked.
std::map<std::string, Tensor> load_npz(const std::filesystem::path& path, Device device = Device::cpu());

}  // namespace mt
