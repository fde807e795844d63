# ---- The OTLP exporter (--otlp, docs/otlp.md) ----------------------------------
# libprotobuf with the vendored opentelemetry-proto compiled by protoc, libcurl
# and zlib, from Debian (libprotobuf-dev protobuf-compiler libcurl4-openssl-dev).
# On by default where they are found. cudatrace_otlp is what the tracer links:
# the exporter, or, without it, otlp_absent.cpp, where --otlp says what the
# build lacks and `cudatrace --version` says "built without: otlp".
# cudatrace-static compiles otlp.cpp again with the static libcurl's headers
# (CMakeLists.txt) and shares cudatrace_otlp_encoding.
find_package(Protobuf QUIET)
find_package(CURL QUIET)
find_package(ZLIB QUIET)
set(otlp_deps_found OFF)
if(Protobuf_FOUND AND Protobuf_PROTOC_EXECUTABLE AND CURL_FOUND AND ZLIB_FOUND)
  set(otlp_deps_found ON)
endif()
option(CUDATRACE_OTLP "Build the OTLP exporter (--otlp): needs libprotobuf, protoc, libcurl and zlib" ${otlp_deps_found})
set(OTLP_PROTO_DIR ${CMAKE_CURRENT_SOURCE_DIR}/third_party/opentelemetry-proto)
set(OTLP_PROTOS common/v1/common resource/v1/resource trace/v1/trace metrics/v1/metrics
                collector/trace/v1/trace_service collector/metrics/v1/metrics_service)
add_library(cudatrace_otlp_absent OBJECT src/render/otlp_absent.cpp)
target_compile_options(cudatrace_otlp_absent PRIVATE ${COMMON_OPTIONS})
target_link_libraries(cudatrace_otlp_absent PUBLIC cudatrace_core)
if(CUDATRACE_OTLP)
  if(NOT otlp_deps_found)
    message(FATAL_ERROR "CUDATRACE_OTLP needs libprotobuf, protoc, libcurl and zlib (apt-get install libprotobuf-dev "
                        "protobuf-compiler libcurl4-openssl-dev zlib1g-dev), or -DCUDATRACE_OTLP=OFF")
  endif()
  set(OTLP_PROTO_OUT ${CMAKE_CURRENT_BINARY_DIR}/otlp_proto)
  file(MAKE_DIRECTORY ${OTLP_PROTO_OUT})
  set(otlp_proto_files "")
  set(otlp_proto_sources "")
  foreach(proto ${OTLP_PROTOS})
    list(APPEND otlp_proto_files ${OTLP_PROTO_DIR}/opentelemetry/proto/${proto}.proto)
    list(APPEND otlp_proto_sources ${OTLP_PROTO_OUT}/opentelemetry/proto/${proto}.pb.cc)
  endforeach()
  add_custom_command(
    OUTPUT ${otlp_proto_sources}
    COMMAND ${Protobuf_PROTOC_EXECUTABLE} --proto_path=${OTLP_PROTO_DIR} --cpp_out=${OTLP_PROTO_OUT} ${otlp_proto_files}
    DEPENDS ${otlp_proto_files}
    COMMENT "Compiling the OTLP schema (third_party/opentelemetry-proto) with protoc"
    VERBATIM)
  # The encoding (the generated schema, and the metrics' conversion) includes
  # protobuf's headers only, the same for Debian's shared and static
  # libprotobuf: compiled once, for cudatrace and cudatrace-static, each of
  # which links the libprotobuf it uses. An archive, so that it goes along
  # with the object libraries that use it (CMake links the objects of an
  # object library only into the targets that name it).
  add_library(cudatrace_otlp_encoding STATIC src/render/otlp_metrics.cpp ${otlp_proto_sources})
  target_include_directories(cudatrace_otlp_encoding PUBLIC ${OTLP_PROTO_OUT} ${Protobuf_INCLUDE_DIRS}
                             PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include)
  target_compile_options(cudatrace_otlp_encoding PRIVATE ${COMMON_OPTIONS})
  set_source_files_properties(${otlp_proto_sources} PROPERTIES COMPILE_OPTIONS "-w")  # generated code
  add_library(cudatrace_otlp OBJECT src/render/otlp.cpp)
  target_compile_options(cudatrace_otlp PRIVATE ${COMMON_OPTIONS})
  target_compile_definitions(cudatrace_otlp PRIVATE CUDATRACE_VERSION="${PROJECT_VERSION}")
  target_link_libraries(cudatrace_otlp PUBLIC cudatrace_core cudatrace_otlp_encoding protobuf::libprotobuf CURL::libcurl
                                              ZLIB::ZLIB)
else()
  message(STATUS "cudatrace: built without the OTLP exporter (CUDATRACE_OTLP off)")
  add_library(cudatrace_otlp ALIAS cudatrace_otlp_absent)
endif()
