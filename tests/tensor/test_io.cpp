#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "minitensor/tensor/io.h"
#include "tests/common/gpu.h"
#if MT_HAS_DLPACK
#include "minitensor/tensor/dlpack.h"
#endif

namespace mt {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test, removed afterwards.
class IoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    m_dir = fs::temp_directory_path() /
            ("mt_test_io_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(m_dir);
    fs::create_directories(m_dir);
  }
  void TearDown() override { fs::remove_all(m_dir); }
  fs::path file(const std::string& name) const { return m_dir / name; }

  fs::path m_dir;
};

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A .npy file made by hand: `dict` is the header text (padding added here), `data` the raw bytes.
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  const std::size_t preamble = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((preamble + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (std::size_t i = 0; i < preamble - 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

template <class T>
std::string raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// Values that differ per element and fit every dtype.
Tensor sample(const Shape& shape, DType dtype) {
  return arange(0.0, static_cast<double>(shape.numel()), 1.0, dtype).view(shape);
}

void expect_same(const Tensor& got, const Tensor& want) {
  ASSERT_TRUE(got.defined());
  EXPECT_EQ(got.dtype(), want.dtype());
  EXPECT_EQ(got.shape(), want.shape());
  EXPECT_TRUE(got.is_contiguous());
  MT_DISPATCH_DTYPE(want.dtype(), "expect_same", T,
                    [&] { EXPECT_EQ(got.to_vector<T>(), want.to_vector<T>()); });
}

// Runs `body` and checks that it throws E with every one of `parts` in its message.
template <class E, class F>
void expect_error(F&& body, std::initializer_list<std::string> parts) {
  try {
    body();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << part << "' not in: " << e.what();
  }
}

bool shell_ok(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

// ---------------------------------------------------------------- .npy

TEST_F(IoTest, Npy_RoundTrip_EveryDType_AwkwardShapes) {
  const std::vector<Shape> shapes = {{},  {0},    {3, 0, 2},    {1},
                                     {7}, {3, 5}, {2, 3, 5, 7}, {1, 1, 1, 1, 1, 1, 1, 1}};
  for (DType dtype : {DType::F32, DType::I32, DType::U8}) {
    for (const Shape& shape : shapes) {
      SCOPED_TRACE(detail::str(dtype, " ", shape));
      const Tensor t = sample(shape, dtype);
      save_npy(file("t.npy"), t);
      const std::string bytes = read_bytes(file("t.npy"));
      const std::size_t header_size = 10 + (std::uint8_t(bytes[8]) | std::uint8_t(bytes[9]) << 8);
      EXPECT_EQ(header_size % 64, 0u);
      EXPECT_EQ(bytes.size(), header_size + t.nbytes());
      expect_same(load_npy(file("t.npy")), t);
    }
  }
}

TEST_F(IoTest, Npy_HeaderIsWhatNumPyWrites) {
  save_npy(file("a.npy"), sample({3, 4}, DType::F32));
  save_npy(file("b.npy"), sample({7}, DType::U8));
  save_npy(file("c.npy"), sample({}, DType::I32));
  const auto header = [&](const char* name) {
    const std::string bytes = read_bytes(file(name));
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    const std::string h = bytes.substr(10, 118);
    EXPECT_EQ(h.back(), '\n');
    return h.substr(0, h.find_last_not_of(" \n") + 1);
  };
  EXPECT_EQ(header("a.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }");
  EXPECT_EQ(header("b.npy"), "{'descr': '|u1', 'fortran_order': False, 'shape': (7,), }");
  EXPECT_EQ(header("c.npy"), "{'descr': '<i4', 'fortran_order': False, 'shape': (), }");
}

TEST_F(IoTest, Npy_SavesStridedViewsInCOrder) {
  const Tensor base = sample({4, 6}, DType::F32);
  for (const Tensor& view : {base.t(), base.slice(1, 1, 6, 2), base.t().slice(0, 0, 6, 3).unsqueeze(1),
                             base.select(1, 2).unsqueeze(0).expand({3, 4})}) {
    SCOPED_TRACE(detail::str(view.shape(), " strides ", view.strides()));
    ASSERT_FALSE(view.is_contiguous());
    save_npy(file("v.npy"), view);
    expect_same(load_npy(file("v.npy")), view.contiguous());
  }
}

TEST_F(IoTest, Npy_LoadsFortranOrder) {
  // [[0, 1, 2], [3, 4, 5]] in column-major order.
  write_bytes(file("f2.npy"), npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                                        raw(std::vector<float>{0, 3, 1, 4, 2, 5})));
  expect_same(load_npy(file("f2.npy")), sample({2, 3}, DType::F32));
  // (2, 3, 4): element (i, j, k) = 12 i + 4 j + k sits at i + 2 j + 6 k.
  std::vector<std::int32_t> col(24);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) col[static_cast<std::size_t>(i + 2 * j + 6 * k)] = 12 * i + 4 * j + k;
  write_bytes(file("f3.npy"),
              npy_bytes("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3, 4), }", raw(col)));
  expect_same(load_npy(file("f3.npy")), sample({2, 3, 4}, DType::I32));
  // Rank 1 is the same in either order.
  write_bytes(file("f1.npy"), npy_bytes("{'descr': '|u1', 'fortran_order': True, 'shape': (3,), }",
                                        std::string("\0\1\2", 3)));
  expect_same(load_npy(file("f1.npy")), sample({3}, DType::U8));
}

TEST_F(IoTest, Npy_LoadsVersions2And3AndHeaderVariants) {
  const std::string data = raw(std::vector<float>{0, 1, 2, 3, 4, 5});
  for (int major : {2, 3}) {
    write_bytes(file("v.npy"),
                npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data, major));
    expect_same(load_npy(file("v.npy")), sample({2, 3}, DType::F32));
  }
  for (const char* dict : {"{\"shape\": (2,3), \"descr\": \"=f4\", \"fortran_order\": False}",
                           "{ 'descr' : '<f4' ,\n 'fortran_order':False,'shape':( 2L , 3L , ) , }"}) {
    SCOPED_TRACE(dict);
    write_bytes(file("v.npy"), npy_bytes(dict, data));
    expect_same(load_npy(file("v.npy")), sample({2, 3}, DType::F32));
  }
}

TEST_F(IoTest, Npy_LoadsOntoTheRequestedDevice) {
  MT_REQUIRE_GPU();
  save_npy(file("g.npy"), sample({5, 3}, DType::F32).cuda());
  const Tensor t = load_npy(file("g.npy"), Device::cuda(0));
  EXPECT_TRUE(t.is_cuda());
  expect_same(t.cpu(), sample({5, 3}, DType::F32));
}

TEST_F(IoTest, Npy_ErrorsNameTheFileAndTheProblem) {
  const std::string path = file("e.npy").string();
  const auto load = [&] { (void)load_npy(path); };
  expect_error<InvalidArgument>([&] { (void)load_npy(file("missing.npy")); }, {"missing.npy", "cannot open"});

  const std::string good = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                     raw(std::vector<float>(6, 1.0f)));
  write_bytes(path, good.substr(0, 40));  // inside the header
  expect_error<InvalidArgument>(load, {path, "truncated file"});
  write_bytes(path, good.substr(0, 5));  // inside the magic string
  expect_error<InvalidArgument>(load, {path, "truncated file"});
  write_bytes(path, good.substr(0, good.size() - 3));  // inside the data
  expect_error<ShapeError>(load, {path, "truncated data", "(2, 3)", "needs 24 bytes", "holds 21"});
  write_bytes(path, good + "xyz");
  expect_error<ShapeError>(load, {path, "size mismatch", "needs 24 bytes", "holds 27"});

  write_bytes(path, "PK\x03\x04" + good.substr(4));
  expect_error<InvalidArgument>(load, {path, "wrong magic string"});
  std::string v9 = good;
  v9[6] = 9;
  write_bytes(path, v9);
  expect_error<InvalidArgument>(load, {path, "format version 9.0"});

  for (const char* descr : {"<c8", "<f8", "|b1", "|O", "<i8"}) {
    write_bytes(path,
                npy_bytes(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (2,), }",
                          std::string(16, '\0')));
    expect_error<DTypeError>(load, {path, "unsupported dtype", descr});
  }
  write_bytes(path,
              npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", std::string(8, '\0')));
  expect_error<DTypeError>(load, {path, "big-endian", "'>f4'"});
  write_bytes(path, npy_bytes("{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (2,), }",
                              std::string(8, '\0')));
  expect_error<DTypeError>(load, {path, "structured"});

  for (const char* dict :
       {"{'descr': '<f4', 'fortran_order': False}", "{'descr': '<f4', 'fortran_order': Nope, 'shape': (2,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,-1)}", "['descr', '<f4']",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} trailing",
        "{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}"}) {
    SCOPED_TRACE(dict);
    write_bytes(path, npy_bytes(dict, std::string(8, '\0')));
    expect_error<InvalidArgument>(load, {path, "cannot parse the header"});
  }
  write_bytes(
      path,
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }", "abcd"));
  expect_error<ShapeError>(load, {path, "rank 9"});

  expect_error<InvalidArgument>([&] { save_npy(file("u.npy"), Tensor()); }, {"save_npy", "undefined"});
  expect_error<InvalidArgument>([&] { save_npy(m_dir / "no_such_dir" / "x.npy", sample({2}, DType::F32)); },
                                {"no_such_dir", "cannot create"});
}

// ---------------------------------------------------------------- .npz

TEST_F(IoTest, Npz_RoundTrip) {
  const Tensor base = sample({4, 6}, DType::I32);
  const std::map<std::string, Tensor> tensors = {{"weight", sample({3, 4}, DType::F32)},
                                                 {"step", sample({}, DType::I32)},
                                                 {"empty", sample({0, 5}, DType::U8)},
                                                 {"layer.0/bias", base.t()}};
  save_npz(file("m.npz"), tensors);
  EXPECT_EQ(read_bytes(file("m.npz")).substr(0, 4), "PK\x03\x04");
  const auto loaded = load_npz(file("m.npz"));
  ASSERT_EQ(loaded.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(loaded.count(name));
    expect_same(loaded.at(name), t.contiguous());
  }
  save_npz(file("none.npz"), {});
  EXPECT_TRUE(load_npz(file("none.npz")).empty());
}

// Archives as Python's zipfile (which numpy uses) writes them: ZIP64 extras, data descriptors, deflate.
TEST_F(IoTest, Npz_ReadsOtherWritersArchives) {
  if (!shell_ok("python3 -c 'import zipfile, zlib'")) GTEST_SKIP() << "python3 with zipfile is not available";
  const Tensor a = sample({3, 4}, DType::F32), b = sample({5}, DType::U8);
  save_npy(file("a.npy"), a);
  save_npy(file("b.npy"), b);
  for (const char* mode : {"zip64", "stream", "deflate"}) {
    SCOPED_TRACE(mode);
    const fs::path out = file(std::string(mode) + ".npz");
    ASSERT_TRUE(
        shell_ok(detail::str("python3 '", MT_TEST_PYTHON_DIR, "/zip_members.py' '", out.string(), "' ", mode,
                             " a.npy='", file("a.npy").string(), "' b.npy='", file("b.npy").string(), "'")));
#if !MT_TEST_HAVE_ZLIB
    if (std::string(mode) == "deflate") {
      expect_error<InvalidArgument>([&] { (void)load_npz(out); }, {"member 'a.npy'", "compressed"});
      continue;
    }
#endif
    const auto loaded = load_npz(out);
    ASSERT_EQ(loaded.size(), 2u);
    expect_same(loaded.at("a"), a);
    expect_same(loaded.at("b"), b);
  }
}

// Python's zipfile (what numpy.load uses) checks the archive's structure and every member's CRC-32.
TEST_F(IoTest, Npz_PythonZipfileAcceptsOurArchives) {
  if (!shell_ok("python3 -c 'import zipfile'")) GTEST_SKIP() << "python3 with zipfile is not available";
  save_npz(file("m.npz"), {{"a", sample({3, 4}, DType::F32)}, {"b", sample({}, DType::U8)}});
  const std::string check = detail::str(
      "python3 -c \"import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); assert z.testzip() is None; ",
      "assert z.namelist() == ['a.npy', 'b.npy'], z.namelist(); assert z.read('b.npy')[-1] == 0\" '",
      file("m.npz").string(), "'");
  EXPECT_TRUE(shell_ok(check)) << check;
}

TEST_F(IoTest, Npz_Errors) {
  expect_error<InvalidArgument>([&] { (void)load_npz(file("missing.npz")); }, {"missing.npz", "cannot open"});
  write_bytes(file("junk.npz"), std::string(100, 'x'));
  expect_error<InvalidArgument>([&] { (void)load_npz(file("junk.npz")); }, {"junk.npz", "not a zip archive"});

  save_npz(file("m.npz"), {{"x", sample({4}, DType::F32)}});
  std::string bytes = read_bytes(file("m.npz"));
  const std::size_t data = bytes.find("\x93NUMPY");
  ASSERT_NE(data, std::string::npos);
  std::string corrupt = bytes;
  corrupt[data + 128 + 4] ^= 0x40;  // a byte of the data (the .npy header is 128 bytes)
  write_bytes(file("crc.npz"), corrupt);
  expect_error<InvalidArgument>([&] { (void)load_npz(file("crc.npz")); },
                                {"crc.npz", "member 'x.npy'", "CRC-32"});
  write_bytes(file("cut.npz"), bytes.substr(0, bytes.size() / 2));
  expect_error<InvalidArgument>([&] { (void)load_npz(file("cut.npz")); }, {"cut.npz", "not a zip archive"});

  expect_error<InvalidArgument>(
      [&] {
        save_npz(file("e.npz"), {{"", sample({1}, DType::F32)}});
      },
      {"empty tensor name"});
}

// ---------------------------------------------------------------- NumPy itself

TEST_F(IoTest, NumPy_RoundTrip) {
  if (!shell_ok("python3 -c 'import numpy'"))
    GTEST_SKIP() << "NumPy is not installed (python3 -c 'import numpy' failed)";
  const Tensor f32 = arange(0.0, 6.0, 0.5, DType::F32).view({3, 4});
  const Tensor i32 = sample({3, 4}, DType::I32).t();
  const Tensor u8 = arange(250.0, 255.0, 1.0, DType::U8);
  save_npy(file("f32.npy"), f32);
  save_npy(file("i32.npy"), i32);
  save_npy(file("u8.npy"), u8);
  save_npz(file("all.npz"), {{"a", f32}, {"b", i32}});
  ASSERT_TRUE(
      shell_ok(detail::str("python3 '", MT_TEST_PYTHON_DIR, "/numpy_roundtrip.py' '", m_dir.string(), "'")))
      << "the NumPy side failed; run tests/python/numpy_roundtrip.py on " << m_dir;

  const Tensor f32x2 = arange(0.0, 12.0, 1.0, DType::F32).view({3, 4});
  expect_same(load_npy(file("out_f32.npy")), f32x2);
  expect_same(load_npy(file("out_fortran.npy")), sample({2, 3, 4}, DType::F32));
  std::vector<std::int32_t> i32_plus_1 = i32.contiguous().to_vector<std::int32_t>();
  for (auto& v : i32_plus_1) ++v;
  expect_same(load_npy(file("out_i32.npy")), from_vector(i32_plus_1, Shape{4, 3}));
  for (const char* name : {"out.npz", "out_compressed.npz"}) {
    SCOPED_TRACE(name);
#if !MT_TEST_HAVE_ZLIB
    if (std::string(name) == "out_compressed.npz") continue;
#endif
    const auto z = load_npz(file(name));
    ASSERT_EQ(z.size(), 2u);
    expect_same(z.at("x"), f32x2);
    expect_same(z.at("y"), u8);
  }
}

// ---------------------------------------------------------------- DLPack

#if MT_HAS_DLPACK

// Counts deleter calls, then forwards to the producer's deleter.
int g_deleter_calls = 0;
void (*g_inner_deleter)(DLManagedTensor*) = nullptr;
void counting_deleter(DLManagedTensor* self) {
  ++g_deleter_calls;
  if (g_inner_deleter) g_inner_deleter(self);
}
DLManagedTensor* counted(DLManagedTensor* m) {
  g_deleter_calls = 0;
  g_inner_deleter = m->deleter;
  m->deleter = counting_deleter;
  return m;
}

TEST(DLPack, ExportDescribesTheTensor) {
  const Tensor base = sample({4, 6}, DType::F32);
  const Tensor view = base.t().slice(1, 1, 4);  // (6, 3), strides (1, 6), offset 6
  DLManagedTensor* m = to_dlpack(view);
  const DLTensor& dl = m->dl_tensor;
  EXPECT_EQ(dl.data, view.data_ptr());
  EXPECT_EQ(dl.byte_offset, 0u);
  EXPECT_EQ(dl.device.device_type, kDLCPU);
  EXPECT_EQ(dl.ndim, 2);
  EXPECT_EQ(dl.dtype.code, kDLFloat);
  EXPECT_EQ(dl.dtype.bits, 32);
  EXPECT_EQ(dl.dtype.lanes, 1);
  EXPECT_EQ(std::vector<std::int64_t>(dl.shape, dl.shape + 2), (std::vector<std::int64_t>{6, 3}));
  EXPECT_EQ(std::vector<std::int64_t>(dl.strides, dl.strides + 2), (std::vector<std::int64_t>{1, 6}));
  m->deleter(m);
  const DLManagedTensor* u8 = to_dlpack(sample({2}, DType::U8));
  EXPECT_EQ(u8->dl_tensor.dtype.code, kDLUInt);
  EXPECT_EQ(u8->dl_tensor.dtype.bits, 8);
  u8->deleter(const_cast<DLManagedTensor*>(u8));
  expect_error<InvalidArgument>([] { (void)to_dlpack(Tensor()); }, {"to_dlpack", "undefined"});
}

double at(const Tensor& t, std::int64_t i, std::int64_t j) {
  const Tensor e = t.select(0, i).select(0, j);
  return MT_DISPATCH_DTYPE(e.dtype(), "at", T, [&] { return static_cast<double>(e.item<T>()); });
}

TEST(DLPack, RoundTripSharesMemoryAndOwnsIt) {
  for (DType dtype : {DType::F32, DType::I32, DType::U8}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor original = sample({3, 4}, dtype);
    const Tensor view = original.t();  // exported with strides (1, 4)
    Tensor imported = from_dlpack(counted(to_dlpack(view)));
    EXPECT_EQ(imported.data_ptr(), view.data_ptr());
    EXPECT_EQ(imported.shape(), view.shape());
    EXPECT_EQ(imported.strides(), view.strides());
    EXPECT_EQ(imported.dtype(), dtype);
    // Write through one, read through the other: imported(i, j) is original(j, i).
    imported.select(0, 1).fill_(7.0);  // column 1 of the original
    original.select(0, 2).fill_(9.0);  // row 2 of the original: column 2 of the import
    EXPECT_EQ(at(original, 0, 1), 7.0);
    EXPECT_EQ(at(original, 1, 1), 7.0);
    EXPECT_EQ(at(imported, 3, 2), 9.0);
    EXPECT_EQ(at(imported, 0, 1), 4.0);
    // The import keeps the storage alive without the original, and so does a view of the import.
    original = Tensor();
    const Tensor column = imported.select(1, 2);
    imported = Tensor();
    EXPECT_EQ(g_deleter_calls, 0);
    expect_same(column.contiguous(), full({4}, 9.0, dtype));
  }
  EXPECT_EQ(g_deleter_calls, 1);  // the last iteration's, once its view died
  // The deleter runs once, when the last view dies.
  Tensor imported = from_dlpack(counted(to_dlpack(sample({5}, DType::F32))));
  Tensor view = imported.slice(0, 1, 3);
  imported = Tensor();
  EXPECT_EQ(g_deleter_calls, 0);
  view = Tensor();
  EXPECT_EQ(g_deleter_calls, 1);
}

// A producer's buffer with its own strides and byte offset.
struct Foreign {
  std::vector<float> buffer;
  std::vector<std::int64_t> shape, strides;
  DLManagedTensor managed{};
  int deleted = 0;
};
DLManagedTensor* make_foreign(Foreign& f) {
  f.managed.dl_tensor.data = f.buffer.data();
  f.managed.dl_tensor.device = {kDLCPU, 0};
  f.managed.dl_tensor.ndim = static_cast<int>(f.shape.size());
  f.managed.dl_tensor.dtype = {kDLFloat, 32, 1};
  f.managed.dl_tensor.shape = f.shape.data();
  f.managed.dl_tensor.strides = f.strides.empty() ? nullptr : f.strides.data();
  f.managed.manager_ctx = &f;
  f.managed.deleter = [](DLManagedTensor* self) { ++static_cast<Foreign*>(self->manager_ctx)->deleted; };
  return &f.managed;
}

TEST(DLPack, ImportHonoursStridesAndByteOffset) {
  Foreign f;
  f.buffer.resize(20);
  for (std::size_t i = 0; i < f.buffer.size(); ++i) f.buffer[i] = static_cast<float>(i);
  f.shape = {2, 3};
  f.strides = {1, 4};  // column-major-ish: element (i, j) at 2 + i + 4 j
  make_foreign(f)->dl_tensor.byte_offset = 2 * sizeof(float);
  {
    const Tensor t = from_dlpack(&f.managed);
    EXPECT_EQ(t.strides(), (Shape{1, 4}));
    EXPECT_EQ(t.contiguous().to_vector<float>(), (std::vector<float>{2, 6, 10, 3, 7, 11}));
    f.buffer[7] = -1.0f;  // (1, 1)
    EXPECT_EQ(t.select(0, 1).contiguous().to_vector<float>(), (std::vector<float>{3, -1, 11}));
  }
  EXPECT_EQ(f.deleted, 1);

  Foreign g;  // NULL strides: compact row-major
  g.buffer = {1, 2, 3, 4, 5, 6};
  g.shape = {3, 2};
  {
    const Tensor t = from_dlpack(make_foreign(g));
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(t.to_vector<float>(), g.buffer);
  }
  EXPECT_EQ(g.deleted, 1);

  Foreign h;  // pinned host memory is a CPU tensor
  h.buffer = {4};
  make_foreign(h)->dl_tensor.device = {kDLCUDAHost, 0};
  {
    const Tensor t = from_dlpack(&h.managed);
    EXPECT_TRUE(t.is_cpu());
    EXPECT_TRUE(t.is_pinned());
    EXPECT_EQ(t.item<float>(), 4.0f);
  }
  EXPECT_EQ(h.deleted, 1);
}

TEST(DLPack, RefusedImportsLeaveOwnershipWithTheCaller) {
  Foreign f;
  f.buffer.resize(8);
  f.shape = {2, 4};
  DLManagedTensor* m = make_foreign(f);
  expect_error<InvalidArgument>([] { (void)from_dlpack(nullptr); }, {"null"});
  m->dl_tensor.dtype = {kDLFloat, 64, 1};
  expect_error<DTypeError>([&] { (void)from_dlpack(m); },
                           {"from_dlpack", "unsupported DLPack dtype", "bits 64"});
  m->dl_tensor.dtype = {kDLFloat, 32, 4};
  expect_error<DTypeError>([&] { (void)from_dlpack(m); }, {"lanes 4"});
  m->dl_tensor.dtype = {kDLFloat, 32, 1};
  m->dl_tensor.device = {kDLOpenCL, 0};
  expect_error<DeviceError>([&] { (void)from_dlpack(m); }, {"unsupported DLPack device type 4"});
  m->dl_tensor.device = {kDLCUDA, 97};
  expect_error<DeviceError>([&] { (void)from_dlpack(m); }, {"97"});
  m->dl_tensor.device = {kDLCPU, 0};
  std::vector<std::int64_t> negative = {-1, 1};
  m->dl_tensor.strides = negative.data();
  expect_error<ShapeError>([&] { (void)from_dlpack(m); }, {"negative stride -1"});
  EXPECT_EQ(f.deleted, 0);
  m->dl_tensor.strides = nullptr;
  (void)from_dlpack(m);  // now accepted, and released at once
  EXPECT_EQ(f.deleted, 1);
}

TEST(DLPack, CudaRoundTrip) {
  MT_REQUIRE_GPU();
  Tensor original = sample({4, 5}, DType::F32).cuda();
  DLManagedTensor* m = counted(to_dlpack(original));
  EXPECT_EQ(m->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(m->dl_tensor.device.device_id, 0);
  Tensor imported = from_dlpack(m);
  EXPECT_TRUE(imported.is_cuda());
  EXPECT_EQ(imported.data_ptr(), original.data_ptr());
  imported.fill_(3.0);
  original = Tensor();
  expect_same(imported.cpu(), full({4, 5}, 3.0));
  imported = Tensor();
  EXPECT_EQ(g_deleter_calls, 1);
}

#else
TEST(DLPack, Unavailable) {
  GTEST_SKIP()
      << "built without dlpack/dlpack.h (libdlpack-dev): mt::to_dlpack / mt::from_dlpack are left out";
}
#endif  // MT_HAS_DLPACK

}  // namespace
}  // namespace mt
