# Static archives of the exporters' dependencies, for cudatrace-static.
#
# Debian ships prometheus-cpp as shared libraries only, and a libcurl.a whose
# dependencies (GSSAPI, LDAP, RTMP, SSH, PSL, brotli, IDN) have no static
# archives. Both are built here from Debian's own source packages, which
# scripts/install-deps.sh fetches with `apt-get source` into
# CUDATRACE_DEPS_SOURCES: prometheus-cpp's core, and libcurl with HTTP and
# HTTPS only (OpenSSL, zlib). libprotobuf.a, libssl.a, libcrypto.a and libz.a
# come from Debian's -dev packages as they are.
#
# Defines, for each dependency found, an imported static library:
#   cudatrace_static::prometheus_core   prometheus-cpp's core (metrics, text format)
#   cudatrace_static::curl              libcurl, HTTP/HTTPS only, with OpenSSL and zlib
#   cudatrace_static::protobuf          libprotobuf (protoc: find_package(Protobuf))
# and CUDATRACE_STATIC_INCLUDE_DIR, the headers of the first two (to put BEFORE
# those of Debian's shared builds, /usr/include: same versions, other macros).
# A dependency not found leaves its target undefined (with a warning saying
# why): CMakeLists.txt then builds cudatrace-static without the exporter that
# needs it and says so in its --version ("built without: ...").
include(ExternalProject)

set(CUDATRACE_DEPS_SOURCES /usr/local/src/cudatrace-deps CACHE PATH
    "Where scripts/install-deps.sh unpacks Debian's source packages of prometheus-cpp and curl")
set(static_prefix ${CMAKE_CURRENT_BINARY_DIR}/static-deps)
set(static_lib ${static_prefix}/lib)
# The imported targets name their include directory, which must exist at
# configure time although the headers are installed at build time.
set(CUDATRACE_STATIC_INCLUDE_DIR ${static_prefix}/include)
file(MAKE_DIRECTORY ${CUDATRACE_STATIC_INCLUDE_DIR})

# The sub-builds use this build's compilers and compiler launcher (ccache).
set(static_common_args
    -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_INSTALL_PREFIX=${static_prefix}
    -DCMAKE_INSTALL_LIBDIR=lib
    -DCMAKE_C_COMPILER=${CMAKE_C_COMPILER}
    -DCMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER}
    -DBUILD_SHARED_LIBS=OFF)

# The unpacked source tree of Debian source package NAME (NAME-VERSION), or "".
function(debian_source_dir out name marker)
  file(GLOB candidates LIST_DIRECTORIES true ${CUDATRACE_DEPS_SOURCES}/${name}-[0-9]*)
  set(found "")
  foreach(dir IN LISTS candidates)
    if(EXISTS ${dir}/${marker})
      set(found ${dir})
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# ---- prometheus-cpp: the core only (cudatrace serves /metrics itself) ---------
debian_source_dir(prometheus_source prometheus-cpp core/src/registry.cc)
if(prometheus_source)
  message(STATUS "cudatrace-static: prometheus-cpp from ${prometheus_source}")
  ExternalProject_Add(static_prometheus_cpp
    SOURCE_DIR ${prometheus_source}
    CMAKE_ARGS ${static_common_args} -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
               -DCMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER} -DENABLE_PULL=OFF -DENABLE_PUSH=OFF -DENABLE_COMPRESSION=OFF
               -DENABLE_TESTING=OFF -DGENERATE_PKGCONFIG=OFF -DUSE_THIRDPARTY_LIBRARIES=OFF
    BUILD_BYPRODUCTS ${static_lib}/libprometheus-cpp-core.a
    BUILD_ALWAYS ON  # its own ninja sees a source refetched by install-deps.sh (a Debian update)
    UPDATE_COMMAND "" DOWNLOAD_COMMAND "")
  add_library(cudatrace_static::prometheus_core STATIC IMPORTED GLOBAL)
  set_target_properties(cudatrace_static::prometheus_core PROPERTIES
    IMPORTED_LOCATION ${static_lib}/libprometheus-cpp-core.a
    INTERFACE_INCLUDE_DIRECTORIES ${CUDATRACE_STATIC_INCLUDE_DIR}
    INTERFACE_LINK_LIBRARIES pthread)
  add_dependencies(cudatrace_static::prometheus_core static_prometheus_cpp)
else()
  message(WARNING "cudatrace-static: no prometheus-cpp source in ${CUDATRACE_DEPS_SOURCES} "
                  "(scripts/install-deps.sh fetches it)")
endif()

# ---- libcurl: HTTP and HTTPS through OpenSSL, gzip through zlib ---------------
find_library(static_ssl NAMES libssl.a)
find_library(static_crypto NAMES libcrypto.a)
find_library(static_z NAMES libz.a)
debian_source_dir(curl_source curl lib/easy.c)
if(curl_source AND static_ssl AND static_crypto AND static_z)
  message(STATUS "cudatrace-static: libcurl from ${curl_source}")
  ExternalProject_Add(static_curl
    SOURCE_DIR ${curl_source}
    CMAKE_ARGS ${static_common_args} -DBUILD_TESTING=OFF -DHTTP_ONLY=ON -DBUILD_CURL_EXE=OFF -DENABLE_MANUAL=OFF
               -DCURL_USE_OPENSSL=ON -DOPENSSL_USE_STATIC_LIBS=ON -DCURL_ZLIB=ON -DZLIB_LIBRARY=${static_z}
               -DCURL_BROTLI=OFF -DCURL_ZSTD=OFF -DUSE_NGHTTP2=OFF -DUSE_LIBIDN2=OFF -DCURL_USE_LIBSSH2=OFF
               -DCURL_USE_LIBSSH=OFF -DCURL_USE_GSSAPI=OFF -DUSE_LIBRTMP=OFF -DENABLE_ARES=OFF
               -DCURL_USE_LIBPSL=OFF -DCURL_DISABLE_LDAP=ON -DCURL_DISABLE_LDAPS=ON
    BUILD_BYPRODUCTS ${static_lib}/libcurl.a
    BUILD_ALWAYS ON  # its own ninja sees a source refetched by install-deps.sh (a Debian update)
    UPDATE_COMMAND "" DOWNLOAD_COMMAND "")
  add_library(cudatrace_static::curl STATIC IMPORTED GLOBAL)
  set_target_properties(cudatrace_static::curl PROPERTIES
    IMPORTED_LOCATION ${static_lib}/libcurl.a
    INTERFACE_INCLUDE_DIRECTORIES ${CUDATRACE_STATIC_INCLUDE_DIR}
    INTERFACE_COMPILE_DEFINITIONS CURL_STATICLIB
    INTERFACE_LINK_LIBRARIES "${static_ssl};${static_crypto};${static_z};pthread")
  add_dependencies(cudatrace_static::curl static_curl)
else()
  message(WARNING "cudatrace-static: no static libcurl: no curl source in ${CUDATRACE_DEPS_SOURCES}, or no "
                  "libssl.a, libcrypto.a or libz.a (scripts/install-deps.sh installs and fetches them)")
endif()

# ---- libprotobuf: Debian's libprotobuf-dev ships the archive -------------------
find_library(static_protobuf NAMES libprotobuf.a)
if(static_protobuf)
  add_library(cudatrace_static::protobuf STATIC IMPORTED GLOBAL)
  set_target_properties(cudatrace_static::protobuf PROPERTIES
    IMPORTED_LOCATION ${static_protobuf}
    INTERFACE_LINK_LIBRARIES pthread)
else()
  message(WARNING "cudatrace-static: no libprotobuf.a (libprotobuf-dev)")
endif()
