# What `cmake --install` puts beside the binary and the libraries (the
# systemd units, the man pages, the example config), and the Debian package
# CPack builds from the same install (`cmake --build B --target package`;
# scripts/package configures B for /usr). Package dependencies come from the
# libraries the installed files link (dpkg-shlibdeps), plus adduser for the
# maintainer scripts in deploy/debian.

set(ERRAND_SYSTEMD_UNITDIR "lib/systemd/system" CACHE STRING
    "where the systemd units are installed (relative: under the prefix)")

# The units name /usr/bin/errand and /etc/errand; an install elsewhere
# gets its own paths.
foreach(unit errand.service errand-worker@.service)
  file(READ ${CMAKE_SOURCE_DIR}/deploy/systemd/${unit} text)
  string(REPLACE "/usr/bin/errand" "${CMAKE_INSTALL_FULL_BINDIR}/errand" text "${text}")
  string(REPLACE "/etc/errand/" "${CMAKE_INSTALL_FULL_SYSCONFDIR}/errand/" text "${text}")
  file(WRITE ${CMAKE_BINARY_DIR}/systemd/${unit} "${text}")
  install(FILES ${CMAKE_BINARY_DIR}/systemd/${unit} DESTINATION ${ERRAND_SYSTEMD_UNITDIR})
endforeach()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${CMAKE_SOURCE_DIR}/deploy/systemd/errand.service
             ${CMAKE_SOURCE_DIR}/deploy/systemd/errand-worker@.service)

# The man pages and the example config, written by the errand just built
# from its settings tables (`errand help --write-docs`).
set(ER_DOCS_DIR ${CMAKE_BINARY_DIR}/doc)
set(ER_DOCS ${ER_DOCS_DIR}/errand.1 ${ER_DOCS_DIR}/errand-serve.1 ${ER_DOCS_DIR}/errand-work.1
    ${ER_DOCS_DIR}/errand-api.7 ${ER_DOCS_DIR}/errand.conf.example)
add_custom_command(OUTPUT ${ER_DOCS}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${ER_DOCS_DIR}
  COMMAND $<TARGET_FILE:errand> help --write-docs ${ER_DOCS_DIR}
  DEPENDS errand
  COMMENT "Writing the man pages and the example config")
add_custom_target(er_docs ALL DEPENDS ${ER_DOCS})
install(FILES ${ER_DOCS_DIR}/errand.1 ${ER_DOCS_DIR}/errand-serve.1 ${ER_DOCS_DIR}/errand-work.1
        DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${ER_DOCS_DIR}/errand-api.7 DESTINATION ${CMAKE_INSTALL_MANDIR}/man7)
install(FILES README.md docs/operations.md docs/api.md docs/openapi.yaml
        ${ER_DOCS_DIR}/errand.conf.example DESTINATION ${CMAKE_INSTALL_DOCDIR})
# The config the unit reads: the example, every line commented (defaults);
# an existing file is kept (the package marks it a conffile).
set(ER_CONF_DIR ${CMAKE_INSTALL_FULL_SYSCONFDIR}/errand)
install(CODE "
  set(conf \"\$ENV{DESTDIR}${ER_CONF_DIR}/errand.conf\")
  if(NOT EXISTS \"\${conf}\")
    file(INSTALL \"${ER_DOCS_DIR}/errand.conf.example\" DESTINATION \"${ER_CONF_DIR}\"
         RENAME errand.conf)
  endif()")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME errand)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "errand maintainers <errand@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "reliable background-job server, C client library and CLI")
set(CPACK_PACKAGE_DESCRIPTION "errand keeps every acknowledged job on disk until it is \
completed, dead or cancelled; workers lease jobs over HTTP/JSON. One binary with an embedded \
SQLite store or PostgreSQL for several servers, liberrand and liberrand-pg, and systemd units.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
# dpkg keeps an edited /etc/errand/errand.conf across upgrades
file(WRITE ${CMAKE_BINARY_DIR}/debian/conffiles "${ER_CONF_DIR}/errand.conf\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_SOURCE_DIR}/deploy/debian/postinst ${CMAKE_SOURCE_DIR}/deploy/debian/prerm
    ${CMAKE_SOURCE_DIR}/deploy/debian/postrm ${CMAKE_BINARY_DIR}/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
include(CPack)
